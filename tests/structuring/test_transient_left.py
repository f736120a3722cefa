"""A transient failure is not a document's outcome: documents whose requests failed for good with a 5xx get no
row, the run finishes the rest and exits 75 saying so, and the same command does exactly those, once.

The real `rise-batch structure` in a subprocess against the fake server over HTTP (5xx on every document's first
attempt, one attempt allowed: every request of the first run fails, every one of the second succeeds)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rise_batch.errors import EXIT_RETRY
from rise_batch.fake_llm import FakeLLMServer
from rise_batch.structuring.checkpoint import CheckpointStore
from tests.conftest import SAMPLE

N = 12


def structure(out: Path, base_url: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "rise_batch.cli", "structure", "--corpus", str(SAMPLE), "--out", str(out)]
    cmd += ["--backend", "llm", "--base-url", base_url, "--workers", "0", "--limit", str(N), "--shard-docs", "6"]
    cmd += ["--tpm", "100000000", "--rpm", "100000", "--no-progress", "--config", str(out.parent / "c.yaml")]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_documents_failed_by_5xx_are_left_for_the_resume(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("llm:\n  max_attempts: 1\n")
    out = tmp_path / "out"
    with FakeLLMServer(p500=1.0, max_faults_per_key=1) as server:
        first = structure(out, server.base_url)
        assert first.returncode == EXIT_RETRY, first.stderr[-2000:]
        line = first.stderr.strip().splitlines()[-1]
        assert f"{N} documents were left undone" in line and "server" in line and "Re-run the same command" in line
        assert CheckpointStore(out).read_rows() == []
        second = structure(out, server.base_url)
        assert second.returncode == 0, second.stderr[-2000:]
        stats = json.loads((out / "stats.json").read_text())
        assert stats["docs_total"] == N and "error" not in stats["outcomes"] and "docs_left" not in stats
        assert server.stats()["requests"] == 2 * N  # each document failed once, then was bought once
