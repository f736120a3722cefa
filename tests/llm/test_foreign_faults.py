"""Every failure a foreign server can produce, through each transport: the `direct` path (the default) must fail,
retry, wait and count exactly as the openai SDK's own transport does.

The server is not the project's fake: a bare stdlib HTTP server answering from a script (one behaviour per request,
then plain successes), as a proxy or a self-hosted endpoint would fail: 429 with and without retry-after, 5xx, a
body that is not JSON, a body cut short, a connection dropped before the answer, an answer slower than the timeout,
and a 400 that must not be retried.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from rise_batch.config import LLMConfig
from rise_batch.llm.client import LLMClient
from rise_batch.llm.errors import LLMError

OK = json.dumps(
    {
        "id": "x",
        "object": "chat.completion",
        "model": "gpt-5.4-nano",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "fine"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2},
    }
).encode()
# llama.cpp's answer when a slot's context fills while it generates: a 500 that the same request meets every time
LLAMA_OVERFLOW = json.dumps(
    {"error": {"code": 500, "message": "Context size has been exceeded.", "type": "server_error"}}
)
LLAMA_OVERFLOW = LLAMA_OVERFLOW.encode()
ERROR = json.dumps({"error": {"message": "slow down", "type": "requests"}}).encode()


class Script:
    """The behaviours of the next requests, in order; every request after them succeeds."""

    def __init__(self) -> None:
        self.todo: list[str] = []
        self.seen: list[str] = []
        self.lock = threading.Lock()

    def next(self) -> str:
        with self.lock:
            step = self.todo.pop(0) if self.todo else "ok"
            self.seen.append(step)
            return step


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real servers: a dropped connection is then a surprise
    script: Script

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        step = self.script.next()
        if step == "reset":  # the connection dies before any answer (RST, not a clean close)
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            return
        if step == "slow":
            time.sleep(1.5)
            step = "ok"
        status, body, extra = {
            "ok": (200, OK, {}),
            "429-retry-after": (429, ERROR, {"retry-after": "0.2"}),
            "429-retry-after-ms": (429, ERROR, {"retry-after-ms": "150"}),
            "429-bare": (429, ERROR, {}),
            "503": (503, b"upstream unavailable", {}),
            "500-json": (500, json.dumps({"error": {"message": "boom"}}).encode(), {}),
            "malformed": (200, b'{"id": "x", "choices": [', {}),
            "not-an-object": (200, b"[1, 2]", {}),
            "truncated": (200, OK, {"cut": "1"}),
            "500-context": (500, LLAMA_OVERFLOW, {}),
            "surrogate": (200, OK.replace(b'"fine"', b'"fine\\ud800"'), {}),
            "cut-after-usage": (200, b'{"usage": {"prompt_tokens": 10, "completion_tokens": 2}, "choices": [', {}),
            "400": (400, json.dumps({"error": {"message": "bad request: max_tokens"}}).encode(), {}),
        }[step]
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        for k, v in extra.items():
            if k != "cut":
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if "cut" in extra:  # promises the whole body, sends a third of it, and hangs up
            self.wfile.write(body[: len(body) // 3])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def foreign() -> Iterator[tuple[str, Script]]:
    script = Script()
    handler = type("ScriptedHandler", (Handler,), {"script": script})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", script
    finally:
        httpd.shutdown()
        httpd.server_close()


def call(url: str, backend: str, max_attempts: int = 3) -> tuple[Any, dict[str, Any], list[float]]:
    """One chat() through `backend`: (reply text or the LLMError's (kind, status, attempts, message)), the client's
    stats, and the waits it asked for between attempts."""
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    cfg = LLMConfig(base_url=url, http_backend=backend, timeout_s=0.75, max_attempts=max_attempts, rpm=10**6)

    async def go() -> Any:
        async with LLMClient(cfg, sleep=sleep, cooldown_s=0.0, backoff_initial_s=0.01, backoff_max_s=0.02) as client:
            try:
                reply = await client.chat([{"role": "user", "content": "hi"}])
                return reply.text, client.stats.as_dict()
            except LLMError as e:
                return (e.kind, e.status, e.attempts, str(e)), client.stats.as_dict()

    outcome, stats = asyncio.run(go())
    return outcome, stats, waits


def each_transport(url: str, script: Script, faults: list[str]) -> dict[str, tuple[Any, dict, list[float], list[str]]]:
    """`call` through the SDK's httpx and through `direct`, each meeting `faults` first (3 attempts at most):
    backend -> (outcome, stats, waits, what the server did)."""
    out = {}
    for backend in ("httpx", "direct"):
        script.todo, script.seen = list(faults), []
        out[backend] = (*call(url, backend), list(script.seen))
    return out


RECOVERED = {  # one fault, then a success: which counter it lands in
    "429-retry-after": "rate_limited",
    "429-retry-after-ms": "rate_limited",
    "429-bare": "rate_limited",
    "503": "server_errors",
    "500-json": "server_errors",
    "malformed": "bad_replies",
    "not-an-object": "bad_replies",
    "truncated": "connection_errors",
    "reset": "connection_errors",
    "slow": "timeouts",
}


@pytest.mark.parametrize("fault", sorted(RECOVERED))
def test_a_fault_then_a_success_is_retried_and_counted_alike(foreign: tuple[str, Script], fault: str) -> None:
    seen = {}
    for backend, (outcome, stats, waits, script_seen) in each_transport(*foreign, [fault]).items():
        assert outcome == "fine", (backend, outcome)
        assert script_seen == [fault, "ok"], backend
        assert stats["attempts"] == 2 and stats["retries"] == 1 and stats["failures"] == 0, (backend, stats)
        assert stats[RECOVERED[fault]] == 1, (backend, stats)
        if fault == "429-retry-after":  # the server's wait, plus at most 10% jitter
            assert 0.2 <= waits[0] <= 0.22, (backend, waits)
        elif fault == "429-retry-after-ms":
            assert 0.15 <= waits[0] <= 0.165, (backend, waits)
        else:  # the client's own backoff
            assert len(waits) == 1 and waits[0] <= 0.01, (backend, waits)
        seen[backend] = (stats, len(waits))
    assert seen["direct"] == seen["httpx"]


KIND = {"rate_limited": "rate-limit", "server_errors": "server", "connection_errors": "connection"}
KIND |= {"bad_replies": "bad-response", "timeouts": "timeout"}  # a stats counter -> the LLMError kind it ends in
FINAL_KIND = {f: KIND[RECOVERED[f]] for f in ("429-bare", "503", "reset", "truncated", "slow")}


@pytest.mark.parametrize("fault", sorted(FINAL_KIND))
def test_a_fault_that_persists_fails_alike_after_every_attempt(foreign: tuple[str, Script], fault: str) -> None:
    seen = {}
    for backend, (outcome, stats, waits, _) in each_transport(*foreign, [fault] * 3).items():
        kind, status, attempts, message = outcome
        assert attempts == 3 and stats["failures"] == 1 and stats["retries"] == 2 and len(waits) == 2, backend
        seen[backend] = (kind, status, attempts, stats)
        if status is not None:  # the SDK's wording, whichever transport: "Error code: 503 - ..."
            assert f"Error code: {status}" in message, (backend, message)
            seen[backend] += (message,)
    assert seen["direct"] == seen["httpx"]
    assert seen["direct"][0] == FINAL_KIND[fault]


def test_a_client_error_is_not_retried_and_reads_alike(foreign: tuple[str, Script]) -> None:
    seen = {}
    for backend, (outcome, stats, waits, script_seen) in each_transport(*foreign, ["400"]).items():
        assert script_seen == ["400"] and not waits, backend
        seen[backend] = (outcome, stats)
    assert seen["direct"] == seen["httpx"]
    message = "HTTP 400 client after 1 attempt(s): Error code: 400 - bad request: max_tokens"
    assert seen["direct"][0] == ("client", 400, 1, message)


def test_a_context_overflow_is_not_retried_whatever_its_status(foreign: tuple[str, Script]) -> None:
    seen = {}
    for backend, (outcome, stats, waits, script_seen) in each_transport(*foreign, ["500-context"] * 3).items():
        kind, status, attempts, message = outcome
        assert script_seen == ["500-context"] and not waits, backend  # sent once: it would overflow again
        assert (kind, status, attempts) == ("context-overflow", 500, 1), (backend, outcome)
        assert "Context size has been exceeded" in message, backend
        seen[backend] = (outcome, stats)
    assert seen["direct"] == seen["httpx"]


def test_a_lone_surrogate_escape_is_decoded_not_retried(foreign: tuple[str, Script]) -> None:
    for backend, (outcome, stats, waits, script_seen) in each_transport(*foreign, ["surrogate"]).items():
        assert outcome == "fine\ufffd" and script_seen == ["surrogate"] and not waits, (backend, outcome)
        assert stats["bad_replies"] == 0 and stats["input_tokens"] == 10, backend


@pytest.mark.parametrize("fault", ["malformed", "cut-after-usage"])
def test_an_unusable_reply_twice_the_same_is_not_retried_again_and_is_paid(
    foreign: tuple[str, Script], fault: str
) -> None:
    seen = {}
    for backend, (outcome, stats, _waits, script_seen) in each_transport(*foreign, [fault] * 3).items():
        kind, status, attempts, message = outcome
        assert (kind, attempts) == ("bad-response", 2) and script_seen == [fault] * 2, (backend, outcome)
        assert stats["bad_replies"] == 2 and stats["retries"] == 1, backend
        seen[backend] = (outcome, stats)
    assert seen["direct"] == seen["httpx"]
    billed = seen["direct"][1]["input_tokens"], seen["direct"][1]["output_tokens"]
    # what the bodies said of usage, never below the engine's own count of the request and the body; a body that
    # says none is billed at that count, marked estimated (money/usage.py)
    assert billed[0] >= 20 and billed[1] >= 4 if fault == "cut-after-usage" else billed[0] > 0 and billed[1] > 0
    assert fault == "cut-after-usage" or seen["direct"][1]["usage_estimated"] == 2
