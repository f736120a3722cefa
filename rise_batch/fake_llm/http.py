"""The fake server's HTTP vocabulary: a request, a response, a JSON body, a 400 error. Standard library only.

These live below every route module (chat completions, files and batches, responses) and below the server that
dispatches to them, so a route module can build responses without importing the server that installs it. The
pieces both HTTP engines (threads, asyncio) share live here too: the body-size rule and what an engine is given.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping
from typing import Any, NamedTuple, Protocol, TypeVar

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
    return json.dumps(obj, ensure_ascii=False).encode("utf-8")


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


class Dispatcher(Protocol):
    """What an HTTP engine needs of the fake server: its body limit, its stop event and its routes."""

    max_body_bytes: int

    def steps(self, request: HttpRequest) -> Steps[HttpResponse]: ...

    def dispatch(self, request: HttpRequest) -> HttpResponse: ...

    def stopped(self) -> bool: ...
