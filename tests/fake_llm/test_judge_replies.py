"""The fake grader can misbehave on purpose (echo the prompt, cut its reply short), in process and from the CLI, so
the judge's strict parsing is tested over HTTP against the same server users rehearse with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from openai import OpenAI

from rise_batch.cli import main
from rise_batch.eval.judge import build_grader_messages, parse_grader_reply, reask_messages
from rise_batch.fake_llm import FakeLLMServer
from rise_batch.fake_llm.chat import default_responders
from rise_batch.prompts import load_prompt
from tests.eval.helpers import trajectory, write_run
from tests.fake_llm.helpers import cli_refusal, cli_server


def grader_messages(answer: str, gold: str) -> list[dict[str, str]]:
    return build_grader_messages(load_prompt("judge_grader"), "Capital?", f"Exact Answer: {answer}", [gold])


def ask(server: FakeLLMServer, messages: list[dict[str, str]]) -> str:
    client = OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
    reply = client.chat.completions.create(model="gpt-5.4-mini", messages=messages)  # type: ignore[arg-type]
    return reply.choices[0].message.content or ""


@pytest.mark.parametrize("mode", ["echo", "truncated", "echo-once", "truncated-once"])
def test_misbehaving_grader_replies_over_http(mode: str) -> None:
    messages = grader_messages("Paris", "Paris")
    with FakeLLMServer(responders=default_responders(mode)) as s:
        first = ask(s, messages)
        again = ask(s, reask_messages(messages, first, "not a grader reply"))
        assert [e["responder"] for e in s.log()] == ["judge", "judge"]
    assert parse_grader_reply(first).correct is None
    if mode.startswith("echo"):
        assert "<correct_answer>" in first and "correct: yes if" in first  # the prompt, field names and all
    else:
        assert "confidence" not in first.lower() and "correct" in first  # cut before its last field
    assert parse_grader_reply(again).correct is (True if mode.endswith("-once") else None)


def test_an_unknown_judge_reply_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="judge reply must be one of grader, echo"):
        default_responders("sometimes")


def test_cli_flag_makes_a_running_server_echo_the_grader_prompt(tmp_path: Path, capsys) -> None:
    run = write_run(tmp_path / "run", [trajectory("q", exact_answer="Lyon", answer="Paris")])
    with cli_server("--judge-reply", "echo") as (_, base):
        assert main(["judge", str(run), "--model", "gpt-5.4-mini", "--base-url", base]) == 1
    judgment = json.loads((run / "judgments" / "q.json").read_text())
    assert judgment["unjudged"] is True and judgment["correct"] is None
    assert "1 query unjudged" in capsys.readouterr().out
    bad = cli_refusal("--judge-reply", "sometimes")
    assert bad.returncode == 2 and "judge reply must be one of" in bad.stderr
