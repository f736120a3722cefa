"""The agent over OpenAI's Responses API (`api: responses`), behind the same `client.complete()` as chat completions.

The reference harnesses drive gpt-5-class models through the Responses API (reasoning effort, prompt-cache key,
reasoning items carried between turns). Rather than a second client with its own retries, rate limiting and
pricing, `ResponsesTransport` wraps whichever transport the client uses (rise_batch.llm.transport): each chat
request becomes a Responses request (`instructions`, input items, flat function tools) and each Responses reply is
handed back as a chat completion. Everything above it (tenacity retries, limiter leases, usage, cost) is unchanged.

Requests are stateless (`store: false`): the whole conversation is sent every turn, and the encrypted reasoning
items a reply carries are kept, per tool call, and sent back before that call, as stateless use requires.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

from rise_batch.llm.transport import CHAT_PATH, Transport

MAX_REMEMBERED_CALLS = 200_000  # reasoning items kept per worker (oldest dropped first)


def chat_to_responses(body: dict[str, Any], reasoning: dict[str, list[dict]] | None = None) -> dict[str, Any]:
    """A chat-completions request body as a Responses request body."""
    reasoning = reasoning if reasoning is not None else {}
    instructions: list[str] = []
    items: list[dict[str, Any]] = []
    for m in body["messages"]:
        role = m.get("role")
        if role in ("system", "developer") and not items:
            instructions.append(m.get("content") or "")
        elif role == "tool":
            items.append({"type": "function_call_output", "call_id": m["tool_call_id"], "output": m.get("content")})
        elif role == "assistant" and m.get("tool_calls"):
            if m.get("content"):
                items.append({"role": "assistant", "content": m["content"]})
            for c in m["tool_calls"]:
                items.extend(reasoning.get(c["id"], ()))
                fn = c["function"]
                items.append(
                    {"type": "function_call", "call_id": c["id"], "name": fn["name"], "arguments": fn["arguments"]}
                )
        else:
            items.append({"role": role, "content": m.get("content") or ""})
    out: dict[str, Any] = {"model": body["model"], "input": items, "store": False}
    if instructions:
        out["instructions"] = "\n\n".join(instructions)
    if body.get("tools"):
        out["tools"] = [{"type": "function", **t["function"]} for t in body["tools"]]
    if body.get("reasoning_effort") is not None:
        out["reasoning"] = {"effort": body["reasoning_effort"]}
        out["include"] = ["reasoning.encrypted_content"]
    if body.get("max_completion_tokens"):
        out["max_output_tokens"] = body["max_completion_tokens"]
    for key in ("prompt_cache_key", "temperature", "parallel_tool_calls", "service_tier"):
        if key in body:
            out[key] = body[key]
    return out


def responses_to_chat(reply: dict[str, Any]) -> tuple[dict[str, Any], dict[str, list[dict]]]:
    """A Responses reply as a chat completion, plus the reasoning items that preceded each function call."""
    text: list[str] = []
    calls: list[dict[str, Any]] = []
    pending: list[dict] = []
    carried: dict[str, list[dict]] = {}
    summary: list[str] = []
    for item in reply.get("output") or []:
        kind = item.get("type")
        if kind == "reasoning":
            pending.append({k: v for k, v in item.items() if k != "status"})
            parts = item.get("summary") if isinstance(item.get("summary"), list) else []
            summary += [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
        elif kind == "function_call":
            calls.append(
                {
                    "id": item["call_id"],
                    "type": "function",
                    "function": {"name": item["name"], "arguments": item.get("arguments") or ""},
                }
            )
            if pending:
                carried[item["call_id"]], pending = pending, []
        elif kind == "message":
            text += [c.get("text", "") for c in item.get("content") or [] if c.get("type") == "output_text"]
    usage = reply.get("usage") or {}
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        message["tool_calls"] = calls
    if any(summary):  # reasoning summaries (when asked for), where chat servers put reasoning text
        message["reasoning_content"] = "\n\n".join(t for t in summary if t)
    chat = {
        "id": reply.get("id", ""),
        "object": "chat.completion",
        "created": int(reply.get("created_at") or 0),
        "model": reply.get("model", ""),
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {
            "prompt_tokens": usage.get("input_tokens", 0),
            "completion_tokens": usage.get("output_tokens", 0),
            "total_tokens": usage.get("total_tokens", 0),
            "prompt_tokens_details": {"cached_tokens": (usage.get("input_tokens_details") or {}).get("cached_tokens")},
        },
    }
    return chat, carried


def _chat_bytes(content: bytes, table: OrderedDict[str, list[dict]]) -> bytes:
    """A Responses reply body as a chat completion body; the reasoning items it carried go into `table`."""
    try:
        reply = json.loads(content)
    except ValueError:
        return content  # the client reports the unusable body
    if not isinstance(reply, dict):
        return content
    chat, carried = responses_to_chat(reply)
    table.update(carried)
    while len(table) > MAX_REMEMBERED_CALLS:
        table.popitem(last=False)
    return json.dumps(chat).encode()


class ResponsesTransport:
    """A Transport over another: `post("/chat/completions", chat body)` goes to `/responses` and comes back as a
    chat completion body; the reasoning items of each reply are remembered (per client) for the next turns."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.reasoning: OrderedDict[str, list[dict]] = OrderedDict()

    async def post(self, path: str, body: dict[str, Any], timeout: float | None = None) -> tuple[bytes, dict[str, str]]:
        if path != CHAT_PATH:
            return await self.inner.post(path, body, timeout)
        content, headers = await self.inner.post("/responses", chat_to_responses(body, self.reasoning), timeout)
        return _chat_bytes(content, self.reasoning), headers

    async def aclose(self) -> None:
        await self.inner.aclose()
