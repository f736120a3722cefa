"""The agent over OpenAI's Responses API, behind the same `client.complete()` the chat-completions path uses.

The reference harnesses drive gpt-5-class models through the Responses API (reasoning effort, prompt-cache key,
reasoning items carried between turns). Rather than a second client with its own retries, rate limiting and
pricing, `use_responses_api(client)` puts a translator in front of the LLMClient's HTTP calls: each chat request
becomes a Responses request (`instructions`, input items, flat function tools) and each Responses reply is handed
back as a chat completion. Everything above it (tenacity retries, limiter leases, usage, cost) is unchanged.

Requests are stateless (`store: false`): the whole conversation is sent every turn, and the encrypted reasoning
items a reply carries are kept, per tool call, and sent back before that call, as stateless use requires.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

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
    for item in reply.get("output") or []:
        kind = item.get("type")
        if kind == "reasoning":
            pending.append({k: v for k, v in item.items() if k != "status"})
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


class _Translated:
    """What LLMClient reads of an SDK HTTP response: headers and a (chat-shaped) body."""

    def __init__(self, headers: Any, content: bytes) -> None:
        self.headers, self.content = headers, content


class _Proxy:
    def __init__(self, inner: Any, table: OrderedDict[str, list[dict]]) -> None:
        self._inner, self.reasoning = inner, table

    def __getattr__(self, name: str) -> Any:  # close(), aclose(), base_url ... of the wrapped transport
        return getattr(self._inner, name)


class _SdkResponses(_Proxy):
    """In place of the client's AsyncOpenAI: `post("/chat/completions", body=...)` goes to `/responses`."""

    async def post(self, path: str, *, body: dict[str, Any], cast_to: Any, options: dict[str, Any]) -> Any:
        if path != "/chat/completions":
            return await self._inner.post(path, body=body, cast_to=cast_to, options=options)
        request = chat_to_responses(body, self.reasoning)
        response = await self._inner.post("/responses", body=request, cast_to=cast_to, options=options)
        return _Translated(response.headers, _chat_bytes(response.content, self.reasoning))


class _DirectResponses(_Proxy):
    """In place of the client's direct (aiohttp) transport: `post(path, body, timeout) -> (bytes, headers)`."""

    async def post(self, path: str, body: dict[str, Any], timeout: float | None = None) -> tuple[bytes, Any]:
        if path != "/chat/completions":
            return await self._inner.post(path, body, timeout)
        content, headers = await self._inner.post("/responses", chat_to_responses(body, self.reasoning), timeout)
        return _chat_bytes(content, self.reasoning), headers


def use_responses_api(client: Any) -> Any:
    """Route an LLMClient's calls through the Responses API (returns the same client), whichever HTTP path the
    client uses: its SDK client or its direct transport."""
    table: OrderedDict[str, list[dict]] = OrderedDict()
    if getattr(client, "_direct", None) is not None:
        client._direct = _DirectResponses(client._direct, table)
    else:
        client._openai = _SdkResponses(client._openai, table)
    return client
