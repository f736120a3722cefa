"""The fake server's scripted agent policy as a pure function of the conversation, and its HTTP behaviours."""

from __future__ import annotations

import json

import openai
import pytest

from rise_batch.fake_llm import FakeLLMServer
from rise_batch.fake_llm.agent import Step, distinctive_words, key_term, markers, next_action
from rise_batch.space import schemas

RISE = {"search": {"queries"}, "bash": {"command"}, "read": {"path", "offset", "limit"}}
RETRIEVAL = {"search": {"query"}, "get_document": {"docid"}}
DCI = {"bash": {"command"}, "read": {"path", "offset", "limit"}}
Q = "Which city hosted the 'Lyon silk' revolt of 1831? [fake:calls=2]"


def test_question_parsing():
    assert markers(Q) == {"calls": "2"}
    assert key_term(Q) == "Lyon silk"
    assert key_term("Who founded Chicagoland transit?") == "Chicagoland"
    assert "which" not in [w.lower() for w in distinctive_words(Q)]


def test_rise_policy_searches_greps_reads_the_toc_range_then_answers():
    kind, tool, args = next_action(Q, RISE, [], {})
    assert (kind, tool) == ("call", "search") and "Lyon silk" in args["queries"]
    preview = "Query 1: ...\n   1. [3.10] en.wikipedia.org/Lyon.txt\n      Lyon | L5–9: History"
    steps = [Step("search", args, preview)]
    kind, tool, args = next_action(Q, RISE, steps, {})
    assert tool == "bash" and "rg" in args["command"] and "'Lyon silk'" in args["command"]
    rg = "en.wikipedia.org/Lyon.txt:3:title: Lyon silk\nen.wikipedia.org/Lyon.txt:12:The Lyon silk workers rose."
    steps.append(Step("bash", args, rg))
    kind, tool, args = next_action(Q, RISE, steps, {})
    assert (tool, args) == ("read", {"path": "en.wikipedia.org/Lyon.txt", "offset": 0, "limit": 40})
    head = "\n".join(
        [
            "     5\t## Table of Contents",
            "     6\t- L8\u201315: Revolt \u2014 The 1831 rising",
            "     7\t=== DOCUMENT BODY ===",
        ]
    )
    steps.append(Step("read", args, head))
    kind, tool, args = next_action(Q, RISE, steps, {})
    assert (tool, args["offset"], args["limit"]) == ("read", 7, 8)  # the TOC range holding line 12, not line 3
    steps.append(Step("read", args, "    12\tThe Lyon silk workers rose in 1831. Troops came."))
    kind, text = next_action(Q, RISE, steps, {})
    assert kind == "answer" and "Exact Answer: The Lyon silk workers rose in 1831" in text


def test_retrieval_and_dci_policies():
    kind, tool, args = next_action(Q, RETRIEVAL, [], {})
    assert (tool, set(args)) == ("search", {"query"})
    out = "Top 2:\n\n[1] docid: d1  score: 3.0\nnothing here\n\n[2] docid: d2  score: 2.0\nthe Lyon silk revolt"
    kind, tool, args = next_action(Q, RETRIEVAL, [Step("search", args, out)], {})
    assert (tool, args) == ("get_document", {"docid": "d2"})  # the hit whose snippet names the term
    kind, tool, args = next_action(Q, DCI, [], {})
    assert tool == "bash" and "rg" in args["command"]


def test_never_answer_and_padding():
    steps = [Step("bash", {"command": "rg x"}, "")] * 50
    kind, tool, _ = next_action(Q, DCI, steps, {"never-answer": ""})
    assert (kind, tool) == ("call", "bash")
    kind, tool, _ = next_action(Q, RETRIEVAL, [Step("search", {}, ""), Step("get_document", {}, "")], {"calls": "5"})
    assert (kind, tool) == ("call", "search")


def test_tool_calls_and_scripted_errors_over_http():
    tools = [schemas.rise_search_schema(), schemas.bash_schema(), schemas.read_schema()]
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": f"QUESTION: {Q}"}]
    with FakeLLMServer() as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        r = client.chat.completions.create(model="gpt-5.4-mini", messages=messages, tools=tools)
        call = r.choices[0].message.tool_calls[0]
        assert r.choices[0].finish_reason == "tool_calls" and call.function.name == "search"
        assert json.loads(call.function.arguments)["queries"] and r.usage.completion_tokens > 0
        bad = [messages[0], {"role": "user", "content": "QUESTION: x [fake:overflow]"}]
        with pytest.raises(openai.BadRequestError, match="context_length_exceeded"):
            client.chat.completions.create(model="gpt-5.4-mini", messages=bad, tools=tools)
        plain = client.chat.completions.create(model="gpt-5.4-mini", messages=messages)  # no tools: not an agent
        assert not plain.choices[0].message.tool_calls
