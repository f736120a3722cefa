"""The fake server's HTTP vocabulary: a request, a response, a JSON body, a 400 error. Standard library only.

These live below every route module (chat completions, files and batches, responses) and below the server that
dispatches to them, so a route module can build responses without importing the server that installs it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple


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
