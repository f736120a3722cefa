"""The fake server's HTTP vocabulary: a request, a response, a JSON body, a 400 error. Standard library only.

These live below every route module (chat completions, files and batches, responses) and below the server that
dispatches to them, so a route module can build responses without importing the server that installs it. The
pieces both HTTP engines (threads, asyncio) share live here too: the body-size rule and what an engine is given.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Generator, Mapping
from typing import Any, NamedTuple, Protocol, TypeVar

from rise_batch.fake_llm.serve_options import ServeOptions

T = TypeVar("T")
# A route that waits (latency, a hang) is a generator: it yields each wait in seconds and is sent back whether the
# server stopped during it (then it answers 503 at once). The engine waits: a thread sleeps, asyncio awaits a timer.
Steps = Generator[float, bool, T]


class BadRequest(ValueError):
    """The request itself is wrong: answered with a 400, as the real API would."""


class HttpRequest(NamedTuple):
    method: str
    path: str
    query: dict[str, str]
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        try:
            return json.loads(self.body or b"null")
        except ValueError as e:
            raise BadRequest(f"the request body is not valid JSON: {e}") from None


class HttpResponse(NamedTuple):
    status: int
    body: bytes
    headers: Mapping[str, str] = {}
    content_type: str = "application/json"


def dumps(obj: Any) -> bytes:
    """UTF-8 JSON; text that cannot be UTF-8 (a lone surrogate, which a request's `"\\ud800"` escape decodes to) is
    escaped instead, as valid JSON. Before, one such message in the request log made every later `GET /v1/_log`
    fail for the rest of the server's life."""
    text = json.dumps(obj, ensure_ascii=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(obj, ensure_ascii=True).encode("ascii")


def error_body(message: str, kind: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def json_response(status: int, obj: Any, headers: Mapping[str, str] | None = None) -> HttpResponse:
    return HttpResponse(status, dumps(obj), headers or {})


def refuse_body(content_length: str | None, limit: int) -> HttpResponse | None:
    """A 400 for an unreadable Content-Length, a 413 for one over the limit, else None. The body is then never read,
    so the connection must be closed after the answer (its unread bytes would be taken for the next request)."""
    raw = content_length or "0"
    if not raw.strip().isdigit():
        response = json_response(400, error_body(f"bad Content-Length {raw!r}", "invalid_request_error"))
    elif int(raw) > limit:
        message = f"request body of {int(raw)} bytes is over this server's limit of {limit} (--max-body-bytes)"
        response = json_response(413, error_body(message, "invalid_request_error"))
    else:
        return None
    return response._replace(headers={"Connection": "close"})


class ConnectionLimits(NamedTuple):
    """How long a connection may take and how much it may make the server hold, so that a server left running
    cannot be exhausted by clients that connect and stall (six connections each sending 100 MB of a declared 250 MB
    body held 600 MB until the clients closed; an idle connection was never closed)."""

    header_timeout_s: float = ServeOptions.header_timeout_s  # from a request's first byte to the end of its head
    body_timeout_s: float = ServeOptions.body_timeout_s  # a whole body (200 MB over loopback takes ~1 s)
    idle_timeout_s: float = ServeOptions.idle_timeout_s  # a keep-alive connection with no request
    max_buffered_bytes: int = ServeOptions.max_buffered_bytes  # bodies being received or held, all connections

    @classmethod
    def for_bodies(cls, max_body_bytes: int) -> ConnectionLimits:
        """The defaults, with room for two of the largest bodies the server accepts held at once."""
        return cls(max_buffered_bytes=max(cls._field_defaults["max_buffered_bytes"], 2 * max_body_bytes))

    def check(self, max_body_bytes: int) -> None:
        for name in ("header_timeout_s", "body_timeout_s", "idle_timeout_s"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value < float("inf"):
                raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")
        if not isinstance(self.max_buffered_bytes, int) or self.max_buffered_bytes < max_body_bytes:
            raise ValueError(
                f"max_buffered_bytes must be an integer >= max_body_bytes ({max_body_bytes}), got "
                f"{self.max_buffered_bytes!r}: a body the server accepts must fit"
            )


class BodyBudget:
    """The bytes of request bodies the server holds, across connections and engines: a body's declared length is
    reserved before it is read, and a request that would pass `cap` is answered 503 (and its connection closed)
    without reading it. Thread-safe: the thread engine reserves from many threads."""

    def __init__(self, cap: int) -> None:
        self.cap, self.used = cap, 0
        self._lock = threading.Lock()

    def reserve(self, n: int) -> bool:
        with self._lock:
            if self.used + n > self.cap:
                return False
            self.used += n
            return True

    def release(self, n: int) -> None:
        with self._lock:
            self.used -= n


def busy(budget: BodyBudget, length: int) -> HttpResponse:
    message = (
        f"request body of {length} bytes would pass the {budget.cap} bytes this server holds across connections "
        "(--max-buffered-bytes); retry later"
    )
    response = json_response(503, error_body(message, "server_error"), {"Retry-After": "1", "Connection": "close"})
    return response


def timed_out(what: str, seconds: float) -> HttpResponse:
    message = f"the request {what} did not arrive within {seconds:g} s; closing the connection"
    return json_response(408, error_body(message, "invalid_request_error"), {"Connection": "close"})


class Dispatcher(Protocol):
    """What an HTTP engine needs of the fake server: its body limit, connection limits and body budget, its stop
    event and its routes."""

    max_body_bytes: int
    limits: ConnectionLimits
    budget: BodyBudget

    def steps(self, request: HttpRequest) -> Steps[HttpResponse]: ...

    def dispatch(self, request: HttpRequest) -> HttpResponse: ...

    def stopped(self) -> bool: ...
