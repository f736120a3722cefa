"""The Responses API translation, both ways (whole trajectories: tests/agent/test_responses_api.py)."""

from __future__ import annotations

from rise_batch.fake_llm.responses import to_chat_request, to_responses_reply
from rise_batch.llm.responses import chat_to_responses, responses_to_chat

TOOLS = [{"type": "function", "function": {"name": "bash", "description": "d", "parameters": {"type": "object"}}}]
CHAT = {
    "model": "gpt-5.4-mini",
    "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "QUESTION: q"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "out"},
    ],
    "tools": TOOLS,
    "reasoning_effort": "low",
    "max_completion_tokens": 100,
    "prompt_cache_key": "k",
}


def test_request_translation_round_trip():
    reasoning = {"c1": [{"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"}]}
    body = chat_to_responses(CHAT, reasoning)
    assert body["instructions"] == "be brief" and body["store"] is False
    assert body["reasoning"] == {"effort": "low"} and body["include"] == ["reasoning.encrypted_content"]
    assert body["max_output_tokens"] == 100 and body["prompt_cache_key"] == "k"
    assert body["tools"] == [{"type": "function", "name": "bash", "description": "d", "parameters": {"type": "object"}}]
    kinds = [i.get("type", i.get("role")) for i in body["input"]]
    assert kinds == ["user", "reasoning", "function_call", "function_call_output"]  # reasoning goes back first
    back = to_chat_request(body)  # what the fake server makes of it
    assert back["messages"] == CHAT["messages"] and back["tools"] == TOOLS
    assert back["reasoning_effort"] == "low" and back["max_completion_tokens"] == 100


def test_reply_translation_round_trip():
    chat = {
        "id": "chatcmpl-x",
        "model": "m",
        "created": 5,
        "choices": [{"message": CHAT["messages"][2] | {"content": "thinking aloud"}}],
        "usage": {
            "prompt_tokens": 10,
            "completion_tokens": 3,
            "total_tokens": 13,
            "prompt_tokens_details": {"cached_tokens": 4},
        },
    }
    reply = to_responses_reply(chat, reasoning=True)
    assert [o["type"] for o in reply["output"]] == ["reasoning", "function_call", "message"]
    assert reply["usage"]["input_tokens_details"]["cached_tokens"] == 4
    again, carried = responses_to_chat(reply)
    message = again["choices"][0]["message"]
    assert message["tool_calls"] == CHAT["messages"][2]["tool_calls"] and message["content"] == "thinking aloud"
    assert again["usage"]["prompt_tokens"] == 10 and again["usage"]["prompt_tokens_details"]["cached_tokens"] == 4
    assert list(carried) == ["c1"] and carried["c1"][0]["encrypted_content"].startswith("fake-")
