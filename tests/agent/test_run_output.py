"""What `rise-batch run` prints (issue 13 section 4): its summary once, progress lines off a terminal. A real
subprocess with stdout and stderr in files, the project's fake server over HTTP, the real sandbox."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.agent.helpers import run_dir, title_query, write_queries


def run_cli(out: Path, agent_world, base_url: str, *extra: str) -> tuple[int, str, str]:
    items = list(agent_world.titles.items())[:3]
    queries = write_queries(out / "q.jsonl", [title_query(d, t) for d, t in items])
    argv = ["run", "--queries", str(queries), "--system", "rise", "--index", str(agent_world.index)]
    argv += ["--docs", str(agent_world.docs), "--out", str(out / "run"), "--base-url", base_url, "--workers", "0"]
    argv += ["--index-backend", "numpy", "--tpm", "100000000", "--rpm", "1000000", "--concurrency", "1", *extra]
    with (out / "stdout.txt").open("w") as o, (out / "stderr.txt").open("w") as e:
        code = subprocess.run([sys.executable, "-m", "rise_batch.cli", *argv], stdout=o, stderr=e, timeout=300)
    return code.returncode, (out / "stdout.txt").read_text(), (out / "stderr.txt").read_text()


def test_run_prints_its_summary_once_and_progress_lines(agent_world, fake_server):
    out = run_dir("summary-once")
    code, stdout, stderr = run_cli(out, agent_world, fake_server.base_url, "--progress-every", "0.05")
    assert code == 0, stderr
    lines = stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("run system=rise model=") and "queries=3 ran=3" in lines[0], stdout
    assert "retries=0 429s=0" in lines[0]  # measured: this invocation sent requests
    progress = re.findall(
        r"^rise-batch run: (\d)/3 queries \(\d+%\) [\d.]+ queries/s ETA \w+ \$\d+\.\d{4}\b.*$", stderr, re.M
    )
    assert progress, stderr
    assert "running=" in stderr and "stop_reasons=" in stderr

    again = run_dir("summary-once-json")
    code, stdout, stderr = run_cli(again, agent_world, fake_server.base_url, "--json")
    assert code == 0, stderr
    assert len(stdout.splitlines()) == 1 and json.loads(stdout)["trajectories"] == 3, stdout
    assert stderr == ""  # a run shorter than the default 30 s prints no progress line


def test_a_resumed_capped_run_tells_its_work_from_the_earlier_runs(agent_world, fake_server):
    """The line of a resumed run under --max-cost: the queries done before it apart, the directory's total spend
    with this run's share, the cap, and the projected total."""
    out = run_dir("progress-resumed")
    code, _, stderr = run_cli(out, agent_world, fake_server.base_url, "--max-cost", "5", "--progress-every", "0.05")
    assert code == 0, stderr
    first = [line for line in stderr.splitlines() if line.startswith("rise-batch run: ")][-1]
    assert first.startswith("rise-batch run: 3/3 queries (100%) ") and "of $5.00 cap, projected $" in first, first
    gone = sorted((out / "run" / "trajectories").glob("*.json"))[0]
    earlier = sum(json.loads(p.read_text())["cost_usd"] for p in (out / "run" / "trajectories").glob("*.json"))
    earlier -= json.loads(gone.read_text())["cost_usd"]
    gone.unlink()
    code, _, stderr = run_cli(out, agent_world, fake_server.base_url, "--max-cost", "5", "--progress-every", "0.05")
    assert code == 0, stderr
    last = [line for line in stderr.splitlines() if line.startswith("rise-batch run: ")][-1]
    assert last.startswith("rise-batch run: 3/3 queries (100%; 2 before this run) "), last
    files = [json.loads(p.read_text()) for p in (out / "run" / "trajectories").glob("*.json")]
    now = sum(t["cost_usd"] for t in files)
    # the query run again is answered from the replies the first run kept: paid once, so nothing more this run
    assert now - earlier > 0 and sum(t["replayed_usd"] for t in files) == pytest.approx(now - earlier)
    assert f"${now:.4f} ($0.0000 this run) of $5.00 cap, projected ${now:.4f}" in last, last
