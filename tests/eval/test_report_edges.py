"""A report is written whatever the accuracy: runs with none and with every query correct, at n = 1 to 10,000,
through the real `rise-batch report` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rise_batch.eval.metrics import wilson_ci
from rise_batch.eval.plots import frontier_figure

SIZES = (1, 8, 100, 2000, 10_000)


def bare_run(root: Path, n: int, correct: bool) -> Path:
    """A run directory of n answered queries, every one judged `correct` (files as `run` and `judge` write them)."""
    (root / "trajectories").mkdir(parents=True)
    (root / "judgments").mkdir()
    (root / "run.json").write_text(json.dumps({"system": "rise", "model": "gpt-5.4-nano", "config_hash": "h"}))
    for q in range(n):
        t = {"query_id": f"q{q}", "system": "rise", "model": "gpt-5.4-nano", "config_hash": "h", "answer": "a",
             "final_text": "Exact Answer: a", "exact_answer": "a", "stop_reason": "answered", "cost_usd": 0.01,
             "model_calls": 1, "tool_calls": {"bash": 1}, "steps": []}  # fmt: skip
        (root / "trajectories" / f"q{q}.json").write_text(json.dumps(t))
        j = {"query_id": f"q{q}", "correct": correct, "method": "llm", "confidence": 90, "cost_usd": 0.0}
        (root / "judgments" / f"q{q}.json").write_text(json.dumps(j))
    return root


@pytest.mark.parametrize("n", SIZES)
def test_wilson_bounds_hold_the_proportion_at_the_edges(n: int) -> None:
    """At 0 of n the lower bound is 0 and at n of n the upper bound is 1, exactly: in floating point they came out
    as 3.5e-18 (n = 100) and 0.9999999999999998 (n = 2,000), a negative error bar in the figure."""
    lo, hi = wilson_ci(0, n)
    assert lo == 0.0 and 0.0 < hi < 1.0
    lo, hi = wilson_ci(n, n)
    assert hi == 1.0 and 0.0 < lo < 1.0
    for k in range(0, n + 1, max(1, n // 50)):
        lo, hi = wilson_ci(k, n)
        assert 0.0 <= lo <= k / n <= hi <= 1.0
    runs = [
        {"system": "rise", "model": "m", "accuracy": 0.0, "accuracy_ci95": wilson_ci(0, n), "agent_usd_per_query": 1},
        {"system": "dci", "model": "m", "accuracy": 1.0, "accuracy_ci95": wilson_ci(n, n), "agent_usd_per_query": 2},
    ]
    assert frontier_figure(runs) is not None  # drew both error bars


def report(tmp_path: Path, *runs: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    cmd = [sys.executable, "-m", "rise_batch.cli", "report", *map(str, runs), "--out", str(tmp_path / "out")]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.parametrize("n", [pytest.param(n, marks=pytest.mark.slow) if n >= 2000 else n for n in SIZES])
def test_report_of_runs_with_none_and_every_query_correct(tmp_path: Path, n: int) -> None:
    none, every = bare_run(tmp_path / "none", n, False), bare_run(tmp_path / "every", n, True)
    done = report(tmp_path, none, every)
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "out" / "report.json").read_text())["runs"]
    assert [s["accuracy"] for s in summary] == [0.0, 1.0]
    assert summary[0]["accuracy_ci95"][0] == 0.0 and summary[1]["accuracy_ci95"][1] == 1.0
    assert (tmp_path / "out" / "accuracy_vs_cost.png").is_file()
    assert f"0.0 [0.0, {100 * wilson_ci(0, n)[1]:.1f}] ({n}/{n})" in (tmp_path / "out" / "report.md").read_text()
    assert f"accuracy 0.0% [0.0, {100 * wilson_ci(0, n)[1]:.1f}] ({n}/{n} judged)" in done.stdout  # the summary
