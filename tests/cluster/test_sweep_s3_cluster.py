"""A sweep with everything in object storage over the real 2-node cluster, killed once and resumed.

Docs, index, queries and the sweep's OUT are on the S3 server, the keys only in the URIs (the driver has no AWS_*
variables; the actors on both nodes get them with their cell configs, in memory). The driver (`rise-batch sweep`)
is killed by SIGKILL once some trajectories are in the bucket; the same command then resumes from the bucket: every
cell ends done and judged, the trajectories written before the kill are not run again, the report is in the
bucket, both nodes ran queries of the one queue, and nothing was written to a local directory named `s3:`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from rise_batch.cli import main
from rise_batch.fake_llm import FakeLLMServer
from tests.agent.helpers import N_DOCS, title_query, world
from tests.cluster.helpers import keyed_bucket
from tests.real_parts import require_bwrap

pytestmark = pytest.mark.slow
N_QUERIES = 6


def trajectories(out) -> dict[str, bytes]:
    cells = out / "cells"
    found = {}
    for cell in cells.iterdir() if cells.exists() else []:
        for p in (cell / "trajectories").glob("*.json"):
            found[f"{cell.name}/{p.name}"] = p.read_bytes()
    return found


def test_sweep_on_s3_over_two_nodes_killed_and_resumed(s3, two_nodes, tmp_path) -> None:
    require_bwrap()
    root, keyed, opts, env = keyed_bucket(s3, two_nodes, "sweep-cluster-cache")
    assert main(["structure", "--corpus", f"{keyed}/corpus.jsonl.gz{opts}", "--out", f"{keyed}/docs{opts}",
                 "--limit", str(N_DOCS), "--index", "--no-progress"]) == 0  # fmt: skip
    rows = [title_query(d, t) for d, t in list(world().titles.items())[:N_QUERIES]]
    (root / "q.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    with FakeLLMServer(latency_ms=400) as server:
        sweep = {
            "name": "s3-cluster",
            "out": f"{keyed}/sw{opts}",
            "queries": f"{keyed}/q.jsonl{opts}",
            "systems": ["rise", "rise-bm25"],
            "models": ["gpt-5.4-mini"],
            "k": [5],
            "corpora": [{"name": "sample", "docs": f"{keyed}/docs{opts}", "index": f"{keyed}/docs/index{opts}"}],
            "run": {
                "workers": 2,
                "concurrency": 4,
                "max_calls": 8,
                "index_backend": "numpy",
                "progress": False,
                "ray_address": two_nodes.address,
                "llm": {"base_url": server.base_url, "rpm": 600000},
            },  # fmt: skip
            "judge": {"model": "gpt-5.4-mini", "base_url": server.base_url, "concurrency": 4},
        }
        config = tmp_path / "sweep.yaml"
        config.write_text(yaml.safe_dump({"sweep": sweep}))
        cmd = [sys.executable, "-m", "rise_batch.cli", "sweep", str(config), "--json"]
        first = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 start_new_session=True)  # fmt: skip
        out = root / "sw"
        deadline = time.monotonic() + 600
        while len(trajectories(out)) < 2 and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert first.poll() is None, (
            "the sweep ended before it could be killed: " + first.stderr.read().decode()[-2000:]
        )
        os.killpg(first.pid, signal.SIGKILL)
        first.communicate()
        before = trajectories(out)
        assert 0 < len(before) < 2 * N_QUERIES

        again = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    result = json.loads(again.stdout)
    assert result["incomplete"] == [] and result["cells"] == 2
    assert s3.env["AWS_SECRET_ACCESS_KEY"] not in again.stdout + again.stderr
    after = trajectories(out)
    assert len(after) == 2 * N_QUERIES
    assert all(after[name] == body for name, body in before.items())  # finished before the kill: not run again
    state = json.loads((out / "sweep.json").read_text())
    assert {e["status"] for e in state["cells"].values()} == {"done"}
    for cell in state["cells"]:
        assert len((out / "cells" / cell / "judgments").glob("*.json")) == N_QUERIES
    ran_on = {node for e in state["cells"].values() for node in (e["run"].get("nodes") or {})}
    assert len(ran_on) == 2, ran_on  # one queue over the pool: both nodes ran queries
    assert (out / "report" / "report.md").is_file() and (out / "report" / "report.json").is_file()
    assert list(cwd.iterdir()) == []  # nothing local, no `s3:` directory
