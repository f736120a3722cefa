"""The judge with structured outputs, over HTTP against the fake server's grader: grader requests carry the
verdict schema (online and in Batch API lines), the replies obey it, each judgment records `schema_constrained`,
and a server without structured outputs is graded without the schema, the switch in the summary."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from rise_batch.cli import main
from rise_batch.eval.judge import GRADER_RESPONSE_FORMAT
from rise_batch.fake_llm import FakeLLMServer
from tests.eval.test_judge_runner import make_run, read_judgments

LLM_GRADED = ("para", "wrong", "prose")
EXPECTED = {"para": True, "wrong": False, "prose": False}


def judge(run: Path, server: FakeLLMServer, *flags: str) -> int:
    return main(
        ["judge", str(run), "--model", "gpt-5.4-mini", "--base-url", server.base_url, "--poll-s", "0.01", *flags]
    )


def grader_entries(server: FakeLLMServer) -> list[dict]:
    return [e for e in server.log() if e.get("responder") == "judge" or e.get("fault") == "response-format"]


@pytest.mark.parametrize("mode", ["online", "batch"])
def test_grader_requests_carry_the_schema_and_judgments_record_it(tmp_path: Path, mode: str) -> None:
    run = make_run(tmp_path / "run")
    with FakeLLMServer() as server:
        assert judge(run, server, "--mode", mode) == 0
        sent = grader_entries(server)
    assert [e["response_format"] for e in sent] == ["json_schema"] * len(LLM_GRADED)
    j = read_judgments(run)
    assert {k: j[k]["correct"] for k in LLM_GRADED} == EXPECTED
    for k in LLM_GRADED:
        assert j[k]["schema_constrained"] is True and j[k]["reasks"] == 0
        jsonschema.validate(json.loads(j[k]["grader_reply"]), GRADER_RESPONSE_FORMAT["json_schema"]["schema"])


@pytest.mark.parametrize("mode", ["online", "batch"])
def test_a_server_without_structured_outputs_is_graded_without_the_schema(tmp_path: Path, mode: str, capsys) -> None:
    run = make_run(tmp_path / "run")
    with FakeLLMServer(response_format="refuse") as server:
        assert judge(run, server, "--mode", mode, "--concurrency", "1", "--json") == 0
        answered = [e for e in server.log() if e.get("responder") == "judge"]
    out = capsys.readouterr().out
    j = read_judgments(run)
    assert {k: j[k]["correct"] for k in LLM_GRADED} == EXPECTED  # the same verdicts, read by the text parser
    assert not any(j[k]["schema_constrained"] for k in LLM_GRADED)
    assert len(answered) == len(LLM_GRADED) and all(e["response_format"] is None for e in answered)
    assert "refused structured outputs" in out
    assert json.loads(out[out.index("{") :])[str(run)]["structured_output_disabled"] == 1


def test_no_structured_output_sends_no_schema(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run")
    with FakeLLMServer() as server:
        assert judge(run, server, "--no-structured-output") == 0
        sent = grader_entries(server)
    assert len(sent) == len(LLM_GRADED) and all(e["response_format"] is None for e in sent)
    assert not any(read_judgments(run)[k]["schema_constrained"] for k in LLM_GRADED)


def test_a_schema_constrained_reply_cut_short_is_still_no_verdict(tmp_path: Path) -> None:
    """A constrained grader cut by its token limit sends half a JSON object: re-asked, then unjudged, never a
    verdict (the strict parser stays the judge of what a reply says)."""
    run = make_run(tmp_path / "run")
    from rise_batch.fake_llm.chat import default_responders

    with FakeLLMServer(responders=default_responders("truncated")) as server:
        assert judge(run, server) == 1
        assert {e["response_format"] for e in grader_entries(server)} == {"json_schema"}
    j = read_judgments(run)
    assert all(j[k].get("unjudged") and j[k]["correct"] is None for k in LLM_GRADED)
    assert all(j[k]["grader_reply"].startswith('{"extracted_final_answer"') for k in LLM_GRADED)
