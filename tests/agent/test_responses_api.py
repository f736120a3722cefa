"""Whole trajectories over `POST /v1/responses` against the fake server."""

from __future__ import annotations

import pytest
from openai.types.chat import ChatCompletion

from rise_batch.agent.job import run_trajectories
from rise_batch.agent.loop import call_record
from rise_batch.llm.responses import responses_to_chat
from tests.agent.helpers import read_trajectories, run_config, run_dir, title_query, write_queries


@pytest.mark.parametrize("http_backend", ["direct", "httpx"])
def test_trajectories_over_the_responses_api(agent_world, fake_server, http_backend):
    out = run_dir(f"responses-{http_backend}")
    items = list(agent_world.titles.items())[:3]
    queries = write_queries(out / "q.jsonl", [title_query(d, t) for d, t in items])
    cfg = run_config(
        out / "run",
        queries,
        fake_server.base_url,
        api="responses",
        llm_reasoning_effort="low",
        llm_http_backend=http_backend,
    )
    stats = run_trajectories(cfg)
    assert stats["stop_reasons"] == {"answered": 3}
    for qid, t in read_trajectories(out / "run").items():
        assert qid in t["surfaced_docids"] and t["exact_answer"] and t["usage"]["output_tokens"] > 0
    paths = {e["path"] for e in fake_server.log()}
    assert paths == {"/v1/responses"}


def test_reasoning_summaries_are_recorded_with_the_model_text():
    """A Responses reply's reasoning summary comes back as the chat message's `reasoning_content`, which the
    trajectory's `calls` keep beside the text (cut at 2,000 characters, whole length kept)."""
    summary = [{"type": "summary_text", "text": "First I search."}, {"type": "summary_text", "text": "r" * 2100}]
    reply = {
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": summary, "encrypted_content": "e"},
            {"type": "message", "content": [{"type": "output_text", "text": "Searching now."}]},
            {"type": "function_call", "call_id": "c1", "name": "search", "arguments": "{}"},
        ]
    }
    chat, _ = responses_to_chat(reply)
    message = ChatCompletion.construct(**chat).choices[0].message
    record = call_record(1, message, 1)
    assert record["text"] == "Searching now." and record["text_chars"] == 14 and record["tool_calls"] == 1
    assert record["reasoning"].startswith("First I search.\n\nrrr") and len(record["reasoning"]) == 2000
    assert record["reasoning_chars"] == len("First I search.") + 2 + 2100
    plain, _ = responses_to_chat({"output": [{"type": "reasoning", "id": "rs_2", "summary": []}]})
    assert "reasoning_content" not in plain["choices"][0]["message"]
