"""A resumed structure run reports the rate of the work it did, not of the work earlier runs did.

Found by the 1M pipeline benchmark (bench/pipeline_1m.py): after a kill and two resubmits, the last job skipped
every shard and stats.json said 960 docs/s for 20,000 documents it never touched. The rate now counts only the
documents the run structured (`docs_this_run`): finished shards and rows checkpointed by an earlier run are not.
Runs the real command in a subprocess, on real files.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest


def structure(corpus, out) -> dict:
    cmd = [sys.executable, "-m", "rise_batch.cli", "structure", "--corpus", str(corpus), "--out", str(out)]
    done = subprocess.run([*cmd, "--shard-docs", "30", "--no-progress"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads((out / "stats.json").read_text())


def test_resumed_run_counts_only_its_own_documents(tmp_path, sample_path):
    out = tmp_path / "out"
    first = structure(sample_path, out)
    assert first["docs_total"] == first["docs_this_run"] == 100
    assert first["docs_per_second"] > 0

    again = structure(sample_path, out)  # every shard was finished: nothing to do, nothing to rate
    assert again["docs_total"] == 100
    assert again["docs_this_run"] == 0 and again["docs_per_second"] == 0.0

    # an interrupted shard: its done marker gone, and its last checkpoint part with it (rows an earlier run lost)
    (out / "stats" / "shard-000001.json").unlink()
    parts = sorted((out / "checkpoint").glob("shard-000001.part-*.parquet"))
    lost = pq.ParquetFile(parts[-1]).metadata.num_rows
    parts[-1].unlink()
    resumed = structure(sample_path, out)
    assert resumed["docs_total"] == 100
    assert resumed["docs_this_run"] == lost > 0
    assert resumed["docs_per_second"] == pytest.approx(lost / resumed["wall_seconds"], rel=0.01)  # both rounded
