"""`POST /v1/responses`: the Responses API, answered by the same responders, faults and usage as chat completions.

A Responses request is turned into the equivalent chat request and served by the chat-completions handler (so
API-key checks, faults, rate limits and the request log all apply), and its reply is turned back into a Responses
object: function calls as `function_call` items, text as a `message` item, and, when the request asked for
reasoning, an opaque reasoning item first, so a client's handling of encrypted reasoning is exercised.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from rise_batch.fake_llm.chat import RouteHost, chat_completions
from rise_batch.fake_llm.http import BadRequest, HttpRequest, HttpResponse, Steps, json_response


def to_chat_request(body: Any) -> dict[str, Any]:
    """The chat-completions body equivalent to a Responses body."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": body["instructions"]})
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise BadRequest("`input` must be a string or a non-empty list of items")
    for item in items:
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind == "function_call":
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item.get("arguments", "")},
            }
            last = messages[-1] if messages else None
            if last is None or last.get("role") != "assistant" or "tool_calls" not in last:
                last = {"role": "assistant", "content": None, "tool_calls": []}
                messages.append(last)
            last["tool_calls"].append(call)
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": item.get("output", "")})
        elif kind == "message" and item.get("role"):
            content = item.get("content")
            if isinstance(content, list):
                content = "".join(c.get("text", "") for c in content if isinstance(c, dict))
            messages.append({"role": item["role"], "content": content})
        elif kind != "reasoning":
            raise BadRequest(f"unsupported input item: {str(item)[:80]}")
    chat: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    if body.get("tools"):
        chat["tools"] = [
            {"type": "function", "function": {k: v for k, v in t.items() if k != "type"}} for t in body["tools"]
        ]
    if isinstance(body.get("reasoning"), dict) and body["reasoning"].get("effort"):
        chat["reasoning_effort"] = body["reasoning"]["effort"]
    if body.get("max_output_tokens"):
        chat["max_completion_tokens"] = body["max_output_tokens"]
    return chat


def to_responses_reply(chat: dict[str, Any], reasoning: bool) -> dict[str, Any]:
    message = chat["choices"][0]["message"] if chat.get("choices") else {}
    usage = chat.get("usage") or {}
    output: list[dict[str, Any]] = []
    rid = re.sub(r"^chatcmpl-", "resp_", chat.get("id", "resp_fake"))
    if reasoning:
        token = hashlib.blake2b(rid.encode(), digest_size=12).hexdigest()
        output.append({"type": "reasoning", "id": f"rs_{token}", "summary": [], "encrypted_content": f"fake-{token}"})
    for call in message.get("tool_calls") or []:
        fn = call["function"]
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{call['id']}",
                "call_id": call["id"],
                "name": fn["name"],
                "arguments": fn["arguments"],
                "status": "completed",
            }
        )
    if message.get("content"):
        text = {"type": "output_text", "text": message["content"], "annotations": []}
        output.append(
            {"type": "message", "id": f"msg_{rid}", "role": "assistant", "status": "completed", "content": [text]}
        )
    details = usage.get("completion_tokens_details") or {}
    return {
        "id": rid,
        "object": "response",
        "created_at": chat.get("created", 0),
        "model": chat.get("model"),
        "status": "completed",
        "output": output,
        "usage": {
            "input_tokens": usage.get("prompt_tokens", 0),
            "input_tokens_details": {
                "cached_tokens": (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
            },
            "output_tokens": usage.get("completion_tokens", 0),
            "output_tokens_details": {"reasoning_tokens": details.get("reasoning_tokens", 0)},
            "total_tokens": usage.get("total_tokens", 0),
        },
    }


def _responses(server: RouteHost, request: HttpRequest, match: re.Match[str]) -> Steps[HttpResponse]:
    body = request.json()
    chat = to_chat_request(body)
    inner = request._replace(body=json.dumps(chat).encode())
    response = yield from chat_completions(server, inner, match)
    if response.status != 200:
        return response
    reply = to_responses_reply(json.loads(response.body), reasoning="reasoning_effort" in chat)
    return json_response(200, reply, response.headers)


def install(server: RouteHost) -> None:
    server.add_route("POST", "/v1/responses", _responses)
