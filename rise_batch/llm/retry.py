"""Which failures of an LLM call are worth another attempt, and how long the server asked us to wait.

Kept pure (no openai import, no I/O) so the policy is testable on its own and any client raising the same shapes of
error can use it: HTTP errors are recognised by their `status_code` (and `headers`, or `response.headers`), transport
errors by their types (the builtin TimeoutError / ConnectionError, which the transports' own errors subclass, see
rise_batch.llm.errors; a caller may pass more).

Retryable: 408 (request timeout), 409 (conflict: a lock on the provider side), 429 (rate limit), every 5xx,
timeouts, connection errors, and a 2xx reply that is unusable as a whole (no choices, a body that is not the API's
schema). Not retryable: every other 4xx — the request itself is wrong and will fail again (bad request, auth, not
found), so the document is recorded as `error` at once instead of burning attempts. A context overflow is never
retried, whatever its status (`context-overflow`): servers word it in their own way and some send it as a 5xx
(llama.cpp answers HTTP 500 "Context size has been exceeded" when a slot fills while generating), yet the same
request overflows the same way every time.

Transient (`is_transient`): a call that failed for good for a reason that is not the request's own (the retryable
kinds above, plus a rate limiter that could not be reached) is not a document's or a query's outcome: it is left
undone, so that the same command retries it.
"""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import Mapping
from typing import NamedTuple

from rise_batch.llm.errors import LimiterUnavailable, LLMError, UnusableReplyError

RETRYABLE_4XX = frozenset({408, 409, 429})
TIMEOUT_TYPES: tuple[type[BaseException], ...] = (TimeoutError,)  # asyncio.TimeoutError is TimeoutError on 3.11
CONNECTION_TYPES: tuple[type[BaseException], ...] = (ConnectionError,)
# How servers say a request does not fit the model's context: OpenAI `context_length_exceeded` / "maximum context
# length", vLLM "This model's maximum context length is N tokens", llama.cpp "the request exceeds the available context
# size" (400) and "Context size has been exceeded" (500), Anthropic-style "prompt is too long", Ollama-style "input
# length exceeds the context length", "context window" wordings.
CONTEXT_OVERFLOW = re.compile(
    r"context_length_exceeded|exceed_context_size|maximum context length|context (?:size|length|window) (?:has been|"
    r"was|is) exceeded|exceeds? the (?:available |maximum )?context|context window|prompt is too long"
    r"|too many tokens in the prompt",
    re.IGNORECASE,
)
TRANSIENT_KINDS = frozenset({"rate-limit", "server", "timeout", "request-timeout", "connection", "conflict", "limiter"})


class Verdict(NamedTuple):
    """kind: rate-limit | server | timeout | connection | conflict | request-timeout | bad-response | client |
    context-overflow | limiter | other."""

    retryable: bool
    kind: str
    status: int | None = None
    retry_after: float | None = None  # seconds the server asked for, when it said


def is_retryable_status(status: int) -> bool:
    return status in RETRYABLE_4XX or 500 <= status <= 599


def status_kind(status: int) -> str:
    if status == 429:
        return "rate-limit"
    if status == 408:
        return "request-timeout"
    if status == 409:
        return "conflict"
    if 500 <= status <= 599:
        return "server"
    if status < 400:
        return "bad-response"
    return "client"


def get_header(headers: Mapping[str, str] | None, name: str) -> str | None:
    """Case-insensitive lookup that works for httpx headers and for plain dicts alike."""
    if not headers:
        return None
    value = headers.get(name)
    if value is None and not hasattr(headers, "multi_items"):  # plain dict: scan, httpx already ignores case
        lowered = name.lower()
        value = next((v for k, v in headers.items() if k.lower() == lowered), None)
    return value


def parse_retry_after(headers: Mapping[str, str] | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from `retry-after-ms` (preferred, finer) or `retry-after` (seconds or an HTTP date)."""
    ms = get_header(headers, "retry-after-ms")
    if ms is not None:
        try:
            return max(float(ms) / 1000.0, 0.0)
        except ValueError:
            pass
    value = get_header(headers, "retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - (time.time() if now is None else now), 0.0)


def classify(
    exc: BaseException,
    *,
    timeout_types: tuple[type[BaseException], ...] = TIMEOUT_TYPES,
    connection_types: tuple[type[BaseException], ...] = CONNECTION_TYPES,
) -> Verdict:
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        headers = getattr(exc, "headers", None)  # a transport's StatusError; else an SDK-style error's response
        if headers is None:
            headers = getattr(getattr(exc, "response", None), "headers", None)
        if is_overflow_message(str(exc)):
            return Verdict(False, "context-overflow", status)
        kind = status_kind(status)
        retryable = kind == "bad-response" or is_retryable_status(status)
        return Verdict(retryable, kind, status, parse_retry_after(headers))
    if isinstance(exc, UnusableReplyError):
        return Verdict(True, "bad-response")
    if isinstance(exc, LimiterUnavailable):  # already waited for: another attempt would wait again
        return Verdict(False, "limiter")
    if isinstance(exc, timeout_types):  # before connection: openai's timeout error subclasses its connection error
        return Verdict(True, "timeout")
    if isinstance(exc, connection_types):
        return Verdict(True, "connection")
    return Verdict(False, "other")


def is_overflow_message(message: str) -> bool:
    """Does this error text say the request is longer than the model's context (any server's wording)?"""
    return bool(CONTEXT_OVERFLOW.search(message))


def is_transient(exc: BaseException) -> bool:
    """A call that failed for good for a reason that is not its request's own (see the module docstring)."""
    return isinstance(exc, LLMError) and exc.kind in TRANSIENT_KINDS
