"""Retry classification: what gets another attempt, and how long the server asked us to wait."""

from __future__ import annotations

import email.utils

import pytest

from rise_batch.llm.retry import UnusableReplyError, classify, get_header, is_retryable_status, parse_retry_after


class Response:
    def __init__(self, headers: dict[str, str]) -> None:
        self.headers = headers


class StatusError(Exception):
    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"HTTP {status}")
        self.status_code = status
        self.response = Response(headers or {})


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504, 599])
def test_retryable_statuses(status: int) -> None:
    assert is_retryable_status(status)
    assert classify(StatusError(status)).retryable


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422])
def test_other_client_errors_are_final(status: int) -> None:
    verdict = classify(StatusError(status))
    assert not verdict.retryable and verdict.kind == "client" and verdict.status == status


def test_kinds_and_retry_after_from_the_error_response() -> None:
    verdict = classify(StatusError(429, {"Retry-After": "2", "retry-after-ms": "1500"}))
    assert verdict == (True, "rate-limit", 429, 1.5)
    assert classify(StatusError(503, {"retry-after": "3"})).retry_after == 3.0
    assert classify(StatusError(500)).kind == "server"
    assert classify(StatusError(408)).kind == "request-timeout"
    assert classify(StatusError(200)).kind == "bad-response"  # a 2xx body that failed validation
    assert classify(StatusError(200)).retryable


def test_transport_errors() -> None:
    class ClientTimeout(Exception):
        pass

    class ClientConnectionError(Exception):
        pass

    class ClientTimeoutSub(ClientConnectionError):  # openai's timeout error subclasses its connection error
        pass

    extra = {"timeout_types": (TimeoutError, ClientTimeoutSub), "connection_types": (ClientConnectionError,)}
    assert classify(TimeoutError()).kind == "timeout"
    assert classify(ConnectionResetError()).kind == "connection"
    assert classify(ClientTimeoutSub(), **extra).kind == "timeout"
    assert classify(ClientConnectionError(), **extra).kind == "connection"
    assert classify(ClientTimeout()) == (False, "other", None, None)
    assert classify(UnusableReplyError("no choices")).retryable
    assert not classify(ValueError("bug")).retryable


def test_parse_retry_after_forms() -> None:
    assert parse_retry_after({"retry-after-ms": "250"}) == 0.25
    assert parse_retry_after({"retry-after": "0.5"}) == 0.5
    assert parse_retry_after({"retry-after-ms": "junk", "retry-after": "4"}) == 4.0
    assert parse_retry_after({"retry-after": "-3"}) == 0.0
    assert parse_retry_after({}) is None and parse_retry_after(None) is None
    date = email.utils.formatdate(1_000_030.0, usegmt=True)
    assert parse_retry_after({"retry-after": date}, now=1_000_000.0) == 30.0
    assert parse_retry_after({"retry-after": "tomorrow-ish"}) is None


def test_get_header_ignores_case_on_plain_dicts() -> None:
    assert get_header({"X-RateLimit-Reset-Requests": "1s"}, "x-ratelimit-reset-requests") == "1s"
    assert get_header({}, "a") is None
