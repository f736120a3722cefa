"""`POST /v1/embeddings`: OpenAI's embeddings format, with deterministic vectors a retrieval test can rely on.

A vector is a hashed bag of words (each lower-cased word adds +-1 at a position drawn from its hash, then the row is
scaled to unit length), so a query shares dimensions with the passages that hold its words and dense retrieval over
the fake server ranks documents much as word overlap does: an `eval-retrieval` run on it measures something real.
The request is checked as the API checks it (`input` a string or a list of non-empty strings, `dimensions` a
positive integer); the key, the server-side rate limit and the 429, 500 and hang faults apply as they do to chat
completions (drawn per request from the hash of its inputs); usage counts the inputs' tokens with the model's
encoding; every request is logged with its path and input count, so a test can count what a client sent.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from typing import Any

from rise_batch.fake_llm.chat import RouteHost, retry_after_headers
from rise_batch.fake_llm.faults import choose_fault, latency_s
from rise_batch.fake_llm.http import BadRequest, HttpRequest, HttpResponse, Steps, error_body, json_response
from rise_batch.llm.tokens import counter_for

DEFAULT_DIMENSIONS = 256
MAX_INPUTS = 2048  # OpenAI's limit of inputs per request
_WORD = re.compile(r"\w+")


def hashed_vector(text: str, dim: int) -> list[float]:
    """The unit-length hashed bag of words of `text` (all zeros for a text without words)."""
    row = [0.0] * dim
    for word in _WORD.findall(text.lower()):
        h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
        row[h % dim] += 1.0 if (h >> 63) & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in row))
    return [v / norm for v in row] if norm else row


def parse_inputs(body: Any) -> tuple[str, list[str], int]:
    """(model, inputs, dimensions) of an embeddings request; BadRequest (a 400) for what the API refuses."""
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        raise BadRequest("the request body must be a JSON object with a string `model`")
    inputs = body.get("input")
    inputs = [inputs] if isinstance(inputs, str) else inputs
    if not isinstance(inputs, list) or not inputs or len(inputs) > MAX_INPUTS:
        raise BadRequest(f"`input` must be a string or a list of 1 to {MAX_INPUTS} strings")
    if not all(isinstance(t, str) and t for t in inputs):
        raise BadRequest("every `input` must be a non-empty string")
    dim = body.get("dimensions", DEFAULT_DIMENSIONS)
    if not isinstance(dim, int) or isinstance(dim, bool) or not 0 < dim <= 4096:
        raise BadRequest(f"`dimensions` must be an integer in 1..4096, got {dim!r}")
    return body["model"], inputs, dim


def _answer(server: RouteHost, model: str, inputs: list[str], dim: int, log: dict[str, Any]) -> Steps[HttpResponse]:
    state, key = server.state, hashlib.blake2b("\0".join(inputs).encode(), digest_size=8).hexdigest()
    attempt = state.begin(key)
    try:
        counter = counter_for(model)
        tokens = sum(counter.count(t) for t in inputs)
        if (wait := state.admit(lambda: tokens)) > 0:
            log["fault"] = "rate-limit"
            headers = retry_after_headers(state.config.retry_after_style, wait) | state.ratelimit_headers()
            return json_response(429, error_body("Rate limit reached (fake-llm limit)", "requests"), headers)
        fault = choose_fault(state.config, key, attempt)
        log.update(key=key, attempt=attempt, fault=fault if fault in ("429", "500", "hang") else None)
        if (yield latency_s(state.config, key, attempt)):
            return json_response(503, error_body("fake-llm is shutting down", "server_error"))
        if fault == "429":
            headers = retry_after_headers(state.config.retry_after_style, state.config.retry_after_ms / 1000.0)
            return json_response(429, error_body("Rate limit reached (fake)", "requests"), headers)
        if fault == "500":
            return json_response(500, error_body("The server had an error (fake)", "server_error"))
        if fault == "hang" and (yield state.config.hang_s):
            return json_response(503, error_body("fake-llm is shutting down", "server_error"))
        log["prompt_tokens"] = tokens
        data = [{"object": "embedding", "index": i, "embedding": hashed_vector(t, dim)} for i, t in enumerate(inputs)]
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        body = {"object": "list", "data": data, "model": model, "usage": usage}
        return json_response(200, body, state.ratelimit_headers())
    finally:
        state.end()


def embeddings(server: RouteHost, request: HttpRequest, _: re.Match[str]) -> Steps[HttpResponse]:
    """`POST /v1/embeddings`: key check, parse, answer, log (path, status, inputs, tokens)."""
    arrived = time.time()
    log: dict[str, Any] = {"t": arrived, "path": request.path, "fault": None}
    required = server.state.config.require_key
    if required is not None and request.headers.get("Authorization") != f"Bearer {required}":
        server.state.record({**log, "status": 401})
        return json_response(401, error_body("Incorrect API key provided (fake)", "invalid_request_error"))
    try:
        model, inputs, dim = parse_inputs(request.json())
    except BadRequest as e:
        server.state.record({**log, "status": 400, "fault": "bad-request"})
        return json_response(400, error_body(str(e), "invalid_request_error"))
    log.update(model=model, inputs=len(inputs), head=inputs[0][:60])
    response = yield from _answer(server, model, inputs, dim, log)
    server.state.record({**log, "status": response.status, "elapsed_s": round(time.time() - arrived, 4)})
    return response


def install(server: RouteHost) -> None:
    server.add_route("POST", "/v1/embeddings", embeddings)
