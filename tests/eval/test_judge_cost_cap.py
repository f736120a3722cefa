"""`judge --max-cost`: the judging's total (what the judgment files record) never passes the limit, the command
exits 3 in one line, and the same command with a higher limit grades the rest. Real client, fake server, HTTP."""

from __future__ import annotations

import json
from pathlib import Path

from rise_batch.cli import main
from rise_batch.fake_llm import FakeLLMServer
from rise_batch.llm.pricing import PriceTable
from tests.eval.helpers import trajectory, write_run

MODEL = "gpt-5.4-mini"


def make_run(root: Path, n: int) -> Path:
    """`n` answers that need the grader (no exact match, no empty answer)."""
    t = [trajectory(f"q{i}", exact_answer=f"answer {i} in prose", answer=f"gold {i}", confidence=50) for i in range(n)]
    return write_run(root, t)


def spent(run: Path) -> float:
    rows = [json.loads(p.read_text()) for p in (run / "judgments").glob("*.json")]
    return sum(j["cost_usd"] + j.get("earlier_cost_usd", 0.0) for j in rows)


def billed(server: FakeLLMServer) -> float:
    prices = PriceTable.load()
    return sum(
        prices.cost(MODEL, e["prompt_tokens"], e["cached_tokens"], e["completion_tokens"])
        for e in server.log()
        if e.get("status") == 200 and "prompt_tokens" in e
    )


def test_judge_max_cost_is_never_passed_and_a_higher_limit_resumes(tmp_path: Path, capsys) -> None:
    run = make_run(tmp_path / "run", 12)
    with FakeLLMServer() as s:
        base = ["judge", str(run), "--model", MODEL, "--base-url", s.base_url, "--concurrency", "3"]
        # a grade costs ~$0.0005, its worst case at 1024 output tokens ~$0.005: a few fit under the limit
        assert main([*base, "--max-output-tokens", "1024", "--max-cost", "0.007"]) == 3
        captured = capsys.readouterr()
        # one line says why it stopped (the progress lines, "rise-batch judge: N judgments ...", aside)
        line = [x for x in captured.err.splitlines() if x.startswith("rise-batch judge:") and " judgments (" not in x]
        assert len(line) == 1 and "stopped at the cost limit" in line[0] and "higher --max-cost" in line[0]
        graded = len(list((run / "judgments").glob("*.json")))
        assert 0 < graded < 12
        assert billed(s) <= 0.007 and spent(run) == billed(s)
        assert "left by --max-cost" in captured.out

        assert main([*base, "--max-output-tokens", "1024", "--max-cost", "1"]) == 0
        assert len(list((run / "judgments").glob("*.json"))) == 12
        assert abs(spent(run) - billed(s)) < 1e-9  # every paid reply is in a judgment, none paid twice


def test_judge_max_cost_counts_what_is_recorded_and_refuses_an_unpriced_model(tmp_path: Path, capsys) -> None:
    run = make_run(tmp_path / "run", 3)
    with FakeLLMServer() as s:
        base = ["judge", str(run), "--base-url", s.base_url]
        assert main([*base, "--model", MODEL, "--max-cost", "1"]) == 0
        calls = len(s.log())
        # the judgments already record more than this limit: nothing is sent, and --force changes nothing of that
        assert main([*base, "--model", MODEL, "--max-cost", str(spent(run) / 2), "--force"]) == 3
        assert len(s.log()) == calls and "stopped at the cost limit" in capsys.readouterr().err
        assert main([*base, "--model", "my-own-model", "--max-cost", "1"]) == 2
        assert "my-own-model" in capsys.readouterr().err and len(s.log()) == calls


def test_judge_batch_mode_submits_only_what_fits_the_limit(tmp_path: Path, capsys) -> None:
    run = make_run(tmp_path / "run", 12)
    with FakeLLMServer() as s:
        base = ["judge", str(run), "--model", MODEL, "--base-url", s.base_url, "--mode", "batch", "--poll-s", "0.01"]
        assert main([*base, "--max-output-tokens", "1024", "--max-cost", "0.007"]) == 3
        graded = len(list((run / "judgments").glob("*.json")))
        assert 0 < graded < 12 and spent(run) <= 0.007
        assert "stopped at the cost limit" in capsys.readouterr().err
        assert main([*base, "--max-output-tokens", "1024", "--max-cost", "1"]) == 0
        assert len(list((run / "judgments").glob("*.json"))) == 12
        assert s.batch_api.stats()["batches_created"] == 2  # what fit, then the rest


def test_judge_progress_line_shows_the_judgments_of_this_run_and_the_cap(tmp_path: Path, capsys) -> None:
    run = make_run(tmp_path / "run", 8)
    # 100 ms a reply: the judging lasts several --progress-every intervals, so a line is printed however fast it runs
    with FakeLLMServer(latency_ms=100) as s:
        base = ["judge", str(run), "--model", MODEL, "--base-url", s.base_url, "--concurrency", "2"]
        assert main([*base, "--max-output-tokens", "1024", "--max-cost", "0.007"]) == 3
        capsys.readouterr()
        before, graded = spent(run), len(list((run / "judgments").glob("*.json")))
        assert main([*base, "--max-cost", "1", "--progress-every", "0.05"]) == 0
        lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("rise-batch judge: ")]
    assert lines, "no progress line"
    last = lines[-1]  # this run's judgments only, the dollars the cap counts (the earlier run's) and this run's
    assert last.startswith(f"rise-batch judge: {8 - graded} judgments "), last
    assert f"${spent(run):.4f} (${spent(run) - before:.4f} this run) of $1.00 cap" in last, last
