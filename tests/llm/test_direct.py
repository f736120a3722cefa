"""The lean `direct` HTTP path (the default) against the fake server: same replies, errors and retries as the SDK's
transports."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from rise_batch.config import ConfigError, LLMConfig, StructureConfig
from rise_batch.fake_llm import FakeLLMServer
from rise_batch.llm.client import LLMClient
from rise_batch.llm.direct import DirectTransport, dumps
from rise_batch.llm.errors import LLMError
from tests.llm.test_client import DOC, messages


def run(client: LLMClient, coro_fn) -> Any:
    async def go() -> Any:
        async with client:
            return await coro_fn(client)

    return asyncio.run(go())


def client_for(server: FakeLLMServer, backend: str, **overrides: Any) -> LLMClient:
    options = {"base_url": server.base_url, "timeout_s": 5.0, "max_attempts": 4, "http_backend": backend, **overrides}
    return LLMClient(LLMConfig(**options), backoff_initial_s=0.01, backoff_max_s=0.05)


def test_direct_is_the_default_and_answers_like_the_sdk_transports() -> None:
    # the lean path is the default: the SDK's httpx costs ~1.5 ms more CPU per request, which capped one process
    # below 300 documents per second; tests/llm/test_foreign_faults.py shows it fails, retries and counts alike
    assert LLMConfig().http_backend == "direct"
    docs = [DOC + f"\nPart {i}: a closing paragraph of ordinary prose number {i}.\n" for i in range(5)]
    seen: dict[str, list[tuple]] = {}
    for backend in ("httpx", "aiohttp", "direct"):
        with FakeLLMServer() as server:
            client = client_for(server, backend)
            replies = run(client, lambda c: asyncio.gather(*(c.chat(messages(d)) for d in docs)))
            # cached tokens (and so cost) depend on which concurrent request reached the server first
            seen[backend] = [(r.text, r.input_tokens, r.output_tokens, r.model) for r in replies]
            assert client.stats.attempts == len(server.log()) == len(docs)
    assert seen["direct"] == seen["httpx"] == seen["aiohttp"]


def test_complete_returns_the_typed_completion_and_headers() -> None:
    with FakeLLMServer(rpm_limit=1000) as server:
        done = run(client_for(server, "direct"), lambda c: c.complete(messages(), timeout=3.0))
    assert done.completion.choices[0].message.content == done.reply.text and '"sections"' in done.reply.text
    assert done.completion.usage.prompt_tokens == done.reply.input_tokens
    assert done.attempts == 1 and done.headers["x-ratelimit-limit-requests"] == "1000"  # lower-cased keys


def test_faults_are_retried_and_counted_as_with_the_sdk() -> None:
    """429 (with retry-after), 500, hangs past the timeout, malformed bodies and empty choices: all retried."""
    with FakeLLMServer(
        p429=0.25, p500=0.15, p_hang=0.15, p_empty=0.1, max_faults_per_key=2, hang_s=30, retry_after_ms=20
    ) as server:
        client = client_for(server, "direct", timeout_s=0.4, max_attempts=5)
        docs = [DOC + f"\nSection {i}: prose that makes this document its own request number {i}.\n" for i in range(16)]
        replies = run(client, lambda c: asyncio.gather(*(c.chat(messages(d)) for d in docs)))
        log = server.log()
    assert all('"sections"' in r.text for r in replies)
    s = client.stats
    assert s.rate_limited == sum(e["status"] == 429 for e in log) > 0
    assert s.server_errors == sum(e["status"] == 500 for e in log) > 0
    assert s.timeouts > 0 and s.bad_replies > 0
    assert s.retries == s.attempts - s.calls == s.rate_limited + s.server_errors + s.timeouts + s.bad_replies


def test_client_errors_are_not_retried_and_keep_the_status() -> None:
    with FakeLLMServer(p400=1.0) as server:
        with pytest.raises(LLMError) as caught:
            run(client_for(server, "direct"), lambda c: c.chat(messages()))
        assert len(server.log()) == 1
    assert caught.value.status == 400 and caught.value.kind == "client" and caught.value.attempts == 1


def test_a_refused_connection_is_a_retryable_connection_error() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = LLMClient(
        LLMConfig(base_url=f"http://127.0.0.1:{port}/v1", max_attempts=2), backoff_initial_s=0.01, backoff_max_s=0.02
    )
    with pytest.raises(LLMError) as caught:
        run(client, lambda c: c.chat(messages()))
    assert caught.value.kind == "connection" and caught.value.attempts == 2
    assert client.stats.connection_errors == 2


def test_the_session_is_closed_in_its_own_loop() -> None:
    with FakeLLMServer() as server:
        client = client_for(server, "direct")
        run(client, lambda c: c.chat(messages()))
    assert isinstance(client.transport, DirectTransport) and client.transport._session is None


def test_bodies_orjson_refuses_fall_back_to_the_stdlib() -> None:
    assert dumps({"a": "é"}) == '{"a":"é"}'.encode()
    assert dumps({"a": "\ud800"}) == b'{"a": "\\ud800"}'  # a lone surrogate: escaped, as the SDK would send it


def test_unknown_http_backend_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="http_backend"):
        StructureConfig(corpus="c", out="o", llm=LLMConfig(http_backend="curl")).validate()
