"""The failures of an LLM call as plain exceptions: what transports raise and what callers catch.

Pure (no openai, tenacity or aiohttp) so that the agent loop, the judge and the batch driver can catch `LLMError`
without loading an HTTP stack, and so that every transport reports a failed request in the same few shapes: one
policy (`rise_batch.llm.retry.classify`) then decides on it whichever transport sent the request.

- `StatusError`: the server answered with an HTTP error status (`status_code`, lower-cased `headers`, whose
  retry-after the classifier honours);
- `TransportTimeout` / `TransportConnectionError`: no answer in time / no connection. They subclass the builtin
  `TimeoutError` / `ConnectionError`, which the classifier already treats as retryable;
- `UnusableReplyError`: a 2xx reply the client cannot use at all;
- `LLMError`: what `LLMClient.chat()` raises once a call has failed for good;
- `KeyRefused`: a 401/403, a configuration error that stops the job (never a document's or a query's outcome);
- `LimiterUnavailable`: the job's shared rate limiter could not be reached (a lost node, a restarting actor).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from rise_batch.errors import EXIT_USAGE, CleanExit


class LLMError(Exception):
    """A call that failed for good. `kind` is a retry.Verdict kind; `status` the HTTP status when there was one."""

    def __init__(
        self, message: str, *, kind: str, status: int | None = None, attempts: int = 0, paid: Any = None, unpriced=0
    ) -> None:
        """`paid`: a types.Reply of what the failed attempts' 2xx replies were billed (unusable replies are paid for
        too); `unpriced`: how many of them said no usage we could read (the caller's cost is then a lower bound)."""
        super().__init__(message)
        self.kind, self.status, self.attempts = kind, status, attempts
        self.paid, self.unpriced = paid, unpriced


class KeyRefused(CleanExit, BaseException):
    """The endpoint refused the API key (HTTP 401 or 403): every request will fail the same way, so the job stops
    (no new documents or queries; running ones finish) and exits naming the variable and the remedy. A
    BaseException, like the budget stop, so that no per-document or per-query `except Exception` records it as
    that item's outcome: the items it hit are left undone and a resume with the right key does them."""

    exit_code = EXIT_USAGE


class LimiterUnavailable(Exception):
    """The job's rate limiter actor did not answer (gone with its node, or restarting) for longer than a worker
    waits: the call was never sent, so it is retried by a resume, not recorded as an outcome."""


class UnusableReplyError(Exception):
    """A 2xx reply the caller cannot use at all (e.g. `choices: []`): a provider glitch, retried like a 5xx."""


class BodyNotJSON(UnusableReplyError):
    """A 2xx body that is not a JSON object. The same body twice is a server's bug, not a glitch: not retried again."""


class TransportError(Exception):
    """A request that got no usable HTTP answer; the base of what a Transport raises."""


class TransportTimeout(TransportError, TimeoutError):
    """The request timed out (connect, read or total)."""


class TransportConnectionError(TransportError, ConnectionError):
    """The request never reached the server, or the connection broke before the answer was read."""


class StatusError(TransportError):
    """An HTTP error status. `headers` (lower-cased keys) carry the server's retry-after and rate-limit state."""

    def __init__(self, message: str, *, status_code: int, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.headers: dict[str, str] = dict(headers or {})

    @classmethod
    def from_response(cls, status_code: int, headers: Mapping[str, str], content: bytes) -> StatusError:
        """The error for a raw response, worded as the openai SDK words its own ("Error code: 429 - <message>"):
        callers record `str(LLMError)`, which must read the same whichever transport failed."""
        return cls(status_message(status_code, content), status_code=status_code, headers=headers)


def status_message(status_code: int, content: bytes) -> str:
    """`Error code: N`, plus ` - <error.message>` when the body is JSON carrying one (the SDK's wording)."""
    message = f"Error code: {status_code}"
    try:
        body = json.loads(content.decode("utf-8", errors="replace").strip())
    except (ValueError, RecursionError):
        return message
    error = body.get("error", body) if isinstance(body, Mapping) else None
    detail = error.get("message") if isinstance(error, Mapping) else None
    if isinstance(detail, str) and detail:
        message += f" - {detail}"
    return message


# How servers word "no structured outputs here" (all 400 or 422): OpenAI "Invalid parameter: 'response_format' of
# type 'json_schema' is not supported with this model" / "Unsupported parameter: 'response_format'", Azure
# "Unrecognized request argument supplied: response_format", llama.cpp "response_format type must be one of ...",
# Groq "This model does not support response format `json_schema`", DeepSeek "This response_format type is
# unavailable now", pydantic-validated servers "response_format: Extra inputs are not permitted". The message must
# name the parameter AND refuse it, so a 400 about something else (a bad schema keyword, a long context) is never
# taken for a provider without structured outputs.
_FORMAT_NAMED = re.compile(r"response[_ ]format|json[_ ]schema|structured[_ ]output|guided[_ ]json", re.IGNORECASE)
_REFUSED = re.compile(
    r"not (?:be )?supported|unsupported|does not support|doesn't support|not available|unavailable|unrecogni[sz]ed"
    r"|not permitted|not allowed|must be one of|unknown (?:parameter|field|argument)|extra (?:inputs|fields)"
    r"|invalid parameter",
    re.IGNORECASE,
)


def refuses_response_format(status: int | None, message: str) -> bool:
    """Is this error a server saying it does not take `response_format` (so the request works without it)?"""
    return status in (400, 422) and bool(_FORMAT_NAMED.search(message)) and bool(_REFUSED.search(message))
