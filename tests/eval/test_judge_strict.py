"""Judging never invents a verdict: a grader that echoes the prompt or is cut short, over HTTP through the real
openai client, gives `unjudged` queries (re-asked once first), counted apart from accuracy in judge and report."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rise_batch.cli import main
from rise_batch.config import LLMConfig
from rise_batch.eval.judge_batch import judge_run_batch
from rise_batch.eval.report import write_report
from rise_batch.fake_llm import FakeLLMServer
from rise_batch.fake_llm.chat import default_responders
from rise_batch.prompts import load_prompt
from tests.eval.helpers import judgment, trajectory, write_run


def wrong_answers(root: Path, n: int = 20) -> Path:
    """n answers that are all wrong, each needing the LLM grader (no exact match, not empty)."""
    return write_run(root, [trajectory(f"q{i}", exact_answer=f"wrong {i}", answer=f"gold {i}") for i in range(n)])


def read_judgments(run: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((run / "judgments").glob("*.json"))}


def judge_calls(server: FakeLLMServer) -> int:
    return sum(1 for e in server.log() if e.get("responder") == "judge")


def judge_argv(run: Path, server: FakeLLMServer, *extra: str) -> list[str]:
    return ["judge", str(run), "--model", "gpt-5.4-mini", "--base-url", server.base_url, *extra]


@pytest.mark.parametrize("mode", ["echo", "truncated"])
def test_a_grader_that_does_not_reply_in_its_format_never_grades(tmp_path: Path, mode: str, capsys) -> None:
    run = wrong_answers(tmp_path / "run")
    with FakeLLMServer(responders=default_responders(mode)) as s:
        assert main(judge_argv(run, s)) == 1
        assert judge_calls(s) == 40  # each query asked, then re-asked once
    j = read_judgments(run)
    assert len(j) == 20
    for v in j.values():
        assert v["correct"] is None and v["unjudged"] is True and v["reasks"] == 1
        assert v["unjudged_reason"].startswith("no grader-format reply after the re-ask")
        assert len(v["grader_replies"]) == 2 and v["cost_usd"] > 0  # both paid replies are kept and counted
    out = capsys.readouterr().out
    assert "unjudged 20, re-asks 20" in out
    assert "accuracy n/a (no judged query); 20 unjudged (left out of accuracy)" in out
    report = write_report([run], tmp_path / "report")
    r = report["runs"][0]
    assert (r["n_judged"], r["n_unjudged"], r["accuracy"], r["n_correct"]) == (0, 20, None, 0)
    assert all(row["correct"] is None and row["unjudged"] for row in r["per_query"])
    md = (tmp_path / "report" / "report.md").read_text()
    assert "| Accuracy % [95% CI] (judged/queries) | Unjudged |" in md and "| – (0/20) | 20 | 0/20 |" in md
    assert "**Warning:** run 1 (RISE): 20 of 20 queries have no verdict" in md and r["too_many_unjudged"]


def test_a_reask_that_gets_a_grader_reply_is_graded_and_costs_both_calls(tmp_path: Path, capsys) -> None:
    t = [trajectory(f"q{i}", exact_answer=f"answer {i % 2} indeed", answer="answer 1") for i in range(6)]
    run = write_run(tmp_path / "run", t)
    with FakeLLMServer(responders=default_responders("echo-once")) as s:
        assert main(judge_argv(run, s)) == 0
        assert judge_calls(s) == 12
    j = read_judgments(run)
    assert {k: v["correct"] for k, v in j.items()} == {f"q{i}": i % 2 == 1 for i in range(6)}
    assert all(v["reasks"] == 1 and not v.get("unjudged") and v["parse_error"] is None for v in j.values())
    assert all(v["usage"]["input_tokens"] > 0 and len(v["grader_replies"]) == 2 for v in j.values())
    out = capsys.readouterr().out
    assert "unjudged 0, re-asks 6" in out
    assert "accuracy 50.0% [95% CI " in out and "over 6/6 judged; 0 unjudged" in out


def test_unjudged_queries_are_graded_again_by_the_next_run(tmp_path: Path) -> None:
    run = wrong_answers(tmp_path / "run", 4)
    with FakeLLMServer(responders=default_responders("echo")) as s:
        assert main(judge_argv(run, s)) == 1
    with FakeLLMServer() as s:
        assert main(judge_argv(run, s)) == 0
        assert judge_calls(s) == 4
    assert all(v["correct"] is False and "unjudged" not in v for v in read_judgments(run).values())


def test_batch_mode_reasks_online_and_records_unjudged(tmp_path: Path) -> None:
    good, bad = wrong_answers(tmp_path / "good", 3), wrong_answers(tmp_path / "bad", 3)
    with FakeLLMServer(responders=default_responders("truncated-once")) as s:
        llm = LLMConfig(base_url=s.base_url, model="gpt-5.4-mini")
        summary = asyncio.run(judge_run_batch(good, llm, poll_s=0.01))
        assert (summary.reasks, summary.unjudged, summary.llm) == (3, 0, 3)
        assert sum(1 for e in s.log() if e.get("path") == "/v1/chat/completions") == 3  # the re-asks, online
    assert all(v["correct"] is False and v["reasks"] == 1 for v in read_judgments(good).values())
    with FakeLLMServer(responders=default_responders("truncated")) as s:
        summary = asyncio.run(judge_run_batch(bad, LLMConfig(base_url=s.base_url, model="gpt-5.4-mini"), poll_s=0.01))
    assert summary.unjudged == 3 and all(v["unjudged"] for v in read_judgments(bad).values())


def test_judgments_of_older_versions_without_a_verdict_are_left_out_of_accuracy(tmp_path: Path) -> None:
    """Files written before this fix: `correct: true` read from an echo (missing fields) or a parse error."""
    echo = "Sure:\n\n" + load_prompt("judge_grader")  # all four field names, and "correct: yes if ..."
    good = "extracted_final_answer: x\nreasoning: differs\ncorrect: no\nconfidence: 100"
    t = [trajectory(f"q{i}", exact_answer="x", answer="y") for i in range(5)]
    j = {
        "q0": judgment(True, missing_fields=["extracted_final_answer", "reasoning", "confidence"]),
        "q1": judgment(False, parse_error="no correct field in the grader reply"),
        "q2": judgment(True, grader_reply=echo),  # what the old parser made of an echo: no missing field
        "q3": judgment(True, grader_reply=good),  # a recorded verdict its own reply contradicts
        "q4": judgment(False, grader_reply=good),
    }
    report = write_report([write_run(tmp_path / "run", t, j)], tmp_path / "report")
    r = report["runs"][0]
    assert (r["n_judged"], r["n_unjudged"], r["accuracy"]) == (1, 4, 0.0)
    assert "1/5 (4 unjudged)" in (tmp_path / "report" / "report.md").read_text()


def rise_batch_cmd() -> list[str]:
    exe = shutil.which("rise-batch")
    return [exe] if exe else [sys.executable, "-m", "rise_batch.cli"]


def test_prompt_is_a_name_in_prompts_or_a_path_relative_to_the_working_directory(tmp_path: Path) -> None:
    run = wrong_answers(tmp_path / "run", 2)
    shutil.copy(Path(__file__).parents[2] / "prompts" / "judge_grader.txt", tmp_path / "my_grader.txt")
    (tmp_path / "blind.txt").write_text("Grade this: {response}\n")
    with FakeLLMServer() as s:
        base = [*rise_batch_cmd(), "judge", str(run), "--model", "gpt-5.4-mini", "--base-url", s.base_url]

        def judge(*extra: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([*base, *extra], capture_output=True, text=True, cwd=tmp_path, timeout=120)

        done = judge("--prompt", "my_grader.txt")
        assert done.returncode == 0, done.stderr
        assert "accuracy 0.0% [95% CI 0.0, 65.8] over 2/2 judged" in done.stdout
        for prompt, message in [
            ("nothere/grader.txt", "prompt file 'nothere/grader.txt' not found (relative to the working directory"),
            ("blind.txt", "grader prompt 'blind.txt' lacks {question}, {correct_answer}"),
            ("no_such_prompt", "prompt 'no_such_prompt' not found at"),
        ]:
            failed = judge("--prompt", prompt, "--force")
            assert failed.returncode == 2, failed.stderr
            assert failed.stderr.startswith(f"rise-batch judge: error: {message}"), failed.stderr
            assert "Traceback" not in failed.stderr and len(failed.stderr.strip().splitlines()) == 1
