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


def structure(out: Path, base_url: str, *more: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "rise_batch.cli", "structure", "--corpus", str(SAMPLE), "--out", str(out), *more]
    cmd += ["--backend", "llm", "--base-url", base_url, "--workers", "0", "--limit", str(N), "--shard-docs", "6"]
    cmd += ["--tpm", "100000000", "--rpm", "100000", "--no-progress", "--config", str(out.parent / "c.yaml")]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_documents_failed_by_5xx_are_left_for_the_resume(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("llm:\n  max_attempts: 1\n")
    out = tmp_path / "out"
    with FakeLLMServer(p500=1.0, max_faults_per_key=1) as server:
        first = structure(out, server.base_url, "--json")
        assert first.returncode == EXIT_RETRY, first.stderr[-2000:]
        line = first.stderr.strip().splitlines()[-1]
        assert f"{N} documents were left undone" in line and "server" in line and "Re-run the same command" in line
        printed = json.loads(first.stdout)  # --json prints the stats on exit 75 too
        assert printed["exit_code"] == EXIT_RETRY and printed["docs_left"] == N and printed["message"] in line
        assert CheckpointStore(out).read_rows() == []
        second = structure(out, server.base_url)
        assert second.returncode == 0, second.stderr[-2000:]
        stats = json.loads((out / "stats.json").read_text())
        assert stats["docs_total"] == N and "error" not in stats["outcomes"] and "docs_left" not in stats
        assert server.stats()["requests"] == 2 * N  # each document failed once, then was bought once


def test_a_document_failing_in_every_run_is_given_up_after_three(tmp_path: Path) -> None:
    """Run 1: every request fails (all left); run 2: about half fail again (left, the rest kept); run 3: they fail a
    third time and are recorded as `error` naming each run's failure, so the job ends (exit 0). stats.json agrees
    with the checkpoint after every run, also the runs that exit 75."""
    (tmp_path / "c.yaml").write_text("llm:\n  max_attempts: 1\n")
    out = tmp_path / "out"

    def agrees() -> dict:
        stats = json.loads((out / "stats.json").read_text())
        rows = CheckpointStore(out).read_rows()
        outcomes: dict[str, int] = {}
        for r in rows:
            outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
        assert stats["docs_total"] == len(rows) and stats["outcomes"] == outcomes, (stats, outcomes)
        return stats

    with FakeLLMServer(p500=1.0) as server:
        first = structure(out, server.base_url)
        assert first.returncode == EXIT_RETRY and agrees()["docs_left"] == N
        server.configure(p500=0.5, seed=3)
        second = structure(out, server.base_url)
        assert second.returncode == EXIT_RETRY, second.stderr[-2000:]
        left = agrees()["docs_left"]
        assert 0 < left < N
        server.configure(p500=1.0)
        before = server.stats()["requests"]
        third = structure(out, server.base_url)
        assert third.returncode == 0, third.stderr[-2000:]
        assert server.stats()["requests"] - before == left  # each failing document tried once more, then given up
    stats = agrees()
    assert stats["outcomes"]["error"] == left and "docs_left" not in stats
    errors = [r.error for r in CheckpointStore(out).read_rows() if r.outcome == "error"]
    assert all(
        "in 3 runs in a row" in e and "run 1: " in e and "run 3: " in e and "Error code: 500" in e for e in errors
    )
