"""`POST /v1/chat/completions`: who answers a request (responders), what it costs (usage), and how it fails.

Responders are the extension point for new kinds of traffic: a responder says whether a request is its kind
(by its messages, model name or tools) and produces the assistant message. Structuring requests (a document between
`<document>` tags) get section proposals; agent policies and a judge plug in the same way, ahead of the fallback.
Faults are applied around whichever responder answers, so every kind of traffic can be made to fail.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any, Protocol

from rise_batch.fake_llm.agent import AgentResponder
from rise_batch.fake_llm.faults import choose_fault, latency_s, reported_usage
from rise_batch.fake_llm.http import BadRequest, HttpRequest, HttpResponse, Steps, error_body, json_response
from rise_batch.fake_llm.judge import JudgeResponder
from rise_batch.fake_llm.request import ChatRequest, Responder
from rise_batch.fake_llm.schema import format_type, response_format_error
from rise_batch.fake_llm.serve_options import ServeOptions
from rise_batch.fake_llm.state import ServerState
from rise_batch.fake_llm.structuring import structuring_reply
from rise_batch.llm.tokens import MESSAGE_OVERHEAD_TOKENS, counter_for, message_text

REASONING_TOKENS = {"none": 0, "minimal": 0, "low": 64, "medium": 256, "high": 1024, "xhigh": 2048}


class StructuringResponder:
    name = "structure"

    def matches(self, request: ChatRequest) -> bool:
        return request.document is not None

    def respond(self, request: ChatRequest) -> dict[str, Any]:
        return {"role": "assistant", "content": structuring_reply(request.document or "")}


class FallbackResponder:
    name = "fallback"

    def matches(self, request: ChatRequest) -> bool:
        return True

    def respond(self, request: ChatRequest) -> dict[str, Any]:
        return {
            "role": "assistant",
            "content": f"fake-llm: no scripted policy for this request (model {request.model})",
        }


def default_responders(judge_reply: str = ServeOptions.judge_reply) -> list[Responder]:
    """Every kind of traffic the server answers; `judge_reply` makes the grader misbehave (fake_llm/judge.py)."""
    return [AgentResponder(), JudgeResponder(judge_reply), StructuringResponder(), FallbackResponder()]


def usage(state: ServerState, request: ChatRequest, content: str) -> dict[str, Any]:
    """Token counts like the API's: prompt tokens include the cached system prompt, output includes reasoning.

    Counted with the model's real encoding when bpe-openai is installed (chars/4 otherwise, or for a model name
    with no known encoding): the whole request body, so a `response_format` schema or `tools` are billed too."""
    counter = counter_for(request.model)
    prompt = counter.request(request.body)
    first = request.messages[0]
    cached = 0
    if first.get("role") in ("system", "developer") and state.cache_hit(request.model + message_text(first)):
        cached = counter.count(message_text(first)) + MESSAGE_OVERHEAD_TOKENS
    reasoning = REASONING_TOKENS.get(str(request.body.get("reasoning_effort")), 0)
    completion = counter.count(content) + reasoning
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": reasoning, "audio_tokens": 0},
    }


def retry_after_headers(style: str, seconds: float) -> dict[str, str]:
    headers = {}
    if style in ("both", "ms"):
        headers["retry-after-ms"] = str(max(int(seconds * 1000), 1))
    if style in ("both", "seconds"):
        headers["retry-after"] = f"{seconds:.3f}"
    return headers


def complete(
    state: ServerState, request: ChatRequest, responders: list[Responder]
) -> Steps[tuple[int, dict[str, Any], dict[str, str], dict[str, Any]]]:
    """Answer one chat completion: (status, JSON body, extra headers, log fields).

    A generator: it yields each wait (latency, hang) in seconds and is sent back whether the server stopped during
    it, so the HTTP engine decides how to wait (a thread sleeps on the stop event; asyncio awaits a timer)."""
    cfg = state.config
    attempt = state.begin(request.key)
    try:
        head = request.document if request.document is not None else message_text(request.messages[-1])
        log: dict[str, Any] = {"key": request.key, "attempt": attempt, "model": request.model, "head": head[:60]}
        log["response_format"] = format_type(request.body)  # what the request asked for: tests read it in the log
        log["max_tokens"] = request.body.get("max_completion_tokens") or request.body.get("max_tokens")  # the cap
        refused = response_format_error(request.body, cfg.response_format)
        if refused is not None:  # checked first, as the API validates parameters before it does anything else
            log["fault"] = "response-format"
            return 400, error_body(refused, "invalid_request_error", "invalid_parameter"), {}, log
        wait = state.admit(lambda: counter_for(request.model).request(request.body, exact=False))
        if wait > 0:
            retry_after = max(wait, cfg.retry_after_ms / 1000.0)
            log["fault"] = "rate-limit"
            headers = {**retry_after_headers(cfg.retry_after_style, retry_after), **state.ratelimit_headers()}
            return (
                429,
                error_body("Rate limit reached (fake-llm limit)", "requests", "rate_limit_exceeded"),
                headers,
                log,
            )
        if (over := overflowed(cfg.n_ctx, log, counter_for(request.model).request(request.body))) is not None:
            return over  # llama.cpp checks the prompt against its slot before anything else
        fault = choose_fault(cfg, request.key, attempt)
        log["fault"] = fault
        if (yield latency_s(cfg, request.key, attempt)):
            return 503, error_body("fake-llm is shutting down", "server_error"), {}, log
        if fault == "429":
            headers = retry_after_headers(cfg.retry_after_style, cfg.retry_after_ms / 1000.0)
            return 429, error_body("Rate limit reached (fake)", "requests", "rate_limit_exceeded"), headers, log
        if fault == "500":
            return 500, error_body("The server had an error (fake)", "server_error"), {}, log
        if fault == "400":
            return 400, error_body("Invalid request (fake)", "invalid_request_error"), {}, log
        if fault == "hang" and (yield cfg.hang_s):
            return 503, error_body("fake-llm is shutting down", "server_error"), {}, log
        responder = next(r for r in responders if r.matches(request))
        delay = getattr(responder, "delay_s", None)  # a responder's own scripted wait (the agent's hang, sleep)
        wait_s = delay(request) if delay is not None else 0.0
        if wait_s > 0 and (yield wait_s):
            return 503, error_body("fake-llm is shutting down", "server_error"), {}, log
        message = responder.respond(request)
        content = message.get("content") or ""
        if fault in ("malformed", "surrogate"):  # a surrogate: content ends in "\ud800" (http.dumps escapes it)
            cut = content[: max(len(content) // 2, 1)] + "\n{," if fault == "malformed" else content + "\ud800"
            message = {**message, "content": cut}
        calls = message.get("tool_calls")
        finish = "tool_calls" if calls else "stop"
        counts = usage(state, request, content + (json.dumps(calls) if calls else ""))
        log.update(responder=responder.name, **_log_usage(counts))
        if (over := overflowed(cfg.n_ctx, log, counts["prompt_tokens"], counts["total_tokens"])) is not None:
            return over  # the slot filled while generating
        choices = (
            [] if fault == "empty" else [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}]
        )
        body = {
            "id": f"chatcmpl-fake-{request.key}-{attempt}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.model,
            "choices": choices,
            "usage": reported_usage(cfg.usage, counts),
            "system_fingerprint": "fake-llm",
        }
        if body["usage"] is None:
            del body["usage"]
        return 200, body, state.ratelimit_headers(), log
    finally:
        state.end()


def overflowed(
    n_ctx: int | None, log: dict[str, Any], prompt: int, total: int = 0
) -> tuple[int, dict[str, Any], dict[str, str], dict[str, Any]] | None:
    """llama.cpp's answers past its slot's context, word for word: a prompt over it is a 400, a prompt plus reply
    over it (the slot filled while generating) a 500. None: it fits."""
    if n_ctx is None or max(prompt, total) <= n_ctx:
        return None
    if prompt > n_ctx:
        log["fault"] = "context-prompt"
        message = "the request exceeds the available context size, try increasing it"
        error = {"code": 400, "message": message, "type": "exceed_context_size_error"}
        return 400, {"error": error | {"n_prompt_tokens": prompt, "n_ctx": n_ctx}}, {}, log
    log["fault"] = "context-generation"
    return 500, {"error": {"code": 500, "message": "Context size has been exceeded.", "type": "server_error"}}, {}, log


def _log_usage(counts: dict[str, Any]) -> dict[str, int]:
    return {
        "prompt_tokens": counts["prompt_tokens"],
        "cached_tokens": counts["prompt_tokens_details"]["cached_tokens"],
        "completion_tokens": counts["completion_tokens"],
    }


class RouteHost(Protocol):
    """What a route handler may use of the server. A protocol, so route modules (this one, batch.py, responses.py)
    need not import the server that installs them: the server imports them, never the other way round."""

    state: ServerState
    responders: list[Responder]

    def add_route(self, method: str, pattern: str, handler: RouteHandler, *, first: bool = False) -> None: ...


# A route answers at once (HttpResponse) or, when it must wait (latency, hangs), as a generator of waits (Steps).
RouteHandler = Callable[[RouteHost, HttpRequest, "re.Match[str]"], "HttpResponse | Steps[HttpResponse]"]


def chat_completions(server: RouteHost, request: HttpRequest, _: re.Match[str]) -> Steps[HttpResponse]:
    """`POST /v1/chat/completions`: key check, parse, answer, log. The Responses route reuses it whole."""
    arrived = time.time()
    entry: dict[str, Any] = {"t": arrived, "path": request.path}
    required = server.state.config.require_key
    if required is not None and request.headers.get("Authorization") != f"Bearer {required}":
        server.state.record({**entry, "status": 401, "fault": None})
        return json_response(401, error_body("Incorrect API key provided (fake)", "invalid_request_error"))
    try:
        chat = ChatRequest.parse(request.json())
    except BadRequest as e:
        server.state.record({**entry, "status": 400, "fault": "bad-request"})
        return json_response(400, error_body(str(e), "invalid_request_error"))
    status, body, headers, fields = yield from complete(server.state, chat, server.responders)
    server.state.record({**entry, **fields, "status": status, "elapsed_s": round(time.time() - arrived, 4)})
    return json_response(status, body, headers)
