"""The real client over real HTTP, through the real openai package, against the project's fake server."""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Iterator
from typing import Any

import pytest

from rise_batch.config import ConfigError, LLMConfig
from rise_batch.fake_llm import FakeLLMServer
from rise_batch.llm.client import LLMClient, client_from_config, parse_body
from rise_batch.llm.errors import KeyRefused, LLMError, UnusableReplyError
from rise_batch.llm.limiter import AsyncLimiter
from rise_batch.llm.pricing import PriceTable
from rise_batch.llm.ratelimit import RateLimits
from rise_batch.types import Reply

SYSTEM = "You turn documents into sections. Reply with JSON only."
DOC = (
    "---\ntitle: Sample\n---\nSample\n\nThe sample article opens with a paragraph of ordinary prose about things.\n"
    "History.\nThe history section tells how the sample came to be, over many long and winding years of work.\n"
)


def messages(doc: str = DOC) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"<document>\n{doc}\n</document>"}]


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(retry_after_ms=20) as s:
        yield s


def make_client(server: FakeLLMServer, **overrides: Any) -> LLMClient:
    options = {"base_url": server.base_url, "timeout_s": 5.0, "max_attempts": 4, **overrides}
    return LLMClient(LLMConfig(**options), backoff_initial_s=0.01, backoff_max_s=0.05)


def call(client: LLMClient, msgs: list[dict[str, str]] | None = None) -> Reply:
    async def go() -> Reply:
        async with client:
            return await client.chat(msgs or messages())

    return asyncio.run(go())


def test_success_reports_usage_and_cost(server: FakeLLMServer) -> None:
    client = make_client(server, model="gpt-5.4-nano")
    reply = call(client)
    assert '"sections"' in reply.text and "History" in reply.text
    entry = server.log()[0]
    assert (reply.input_tokens, reply.output_tokens) == (entry["prompt_tokens"], entry["completion_tokens"])
    expected = PriceTable.load().cost("gpt-5.4-nano", *reply[1:4])
    assert reply.cost_usd == pytest.approx(expected) and reply.cost_usd > 0
    assert reply.model == "gpt-5.4-nano"
    assert client.stats.as_dict() | {"cost_usd": 0} == {
        **dict.fromkeys(client.stats.as_dict(), 0),
        "calls": 1,
        "attempts": 1,
        "input_tokens": reply.input_tokens,
        "output_tokens": reply.output_tokens,
    }


def test_second_request_with_the_same_system_prompt_is_partly_cached(server: FakeLLMServer) -> None:
    async def go() -> list[Reply]:
        async with make_client(server) as client:
            return [await client.chat(messages(DOC + f"\nPart {i}.\n")) for i in range(2)]

    first, second = asyncio.run(go())
    assert first.cached_input_tokens == 0 and 0 < second.cached_input_tokens < second.input_tokens
    assert second.cost_usd < first.cost_usd + 1e-12  # cached input is cheaper


def test_reasoning_effort_and_max_tokens_are_sent_only_when_set(server: FakeLLMServer) -> None:
    plain = call(make_client(server, max_output_tokens=0))
    server.reset()
    reasoning = call(make_client(server, reasoning_effort="high"))
    assert reasoning.output_tokens == plain.output_tokens + 1024  # the fake bills 1024 reasoning tokens for "high"


def test_429_with_retry_after_is_honoured_then_succeeds(server: FakeLLMServer) -> None:
    server.configure(p429=1.0, max_faults_per_key=2, retry_after_ms=150)
    client = make_client(server)
    reply = call(client)
    assert '"sections"' in reply.text
    log = server.log()
    assert [e["status"] for e in log] == [429, 429, 200]
    gaps = [b["t"] - a["t"] for a, b in zip(log, log[1:], strict=False)]
    assert all(gap >= 0.15 for gap in gaps)  # a lower bound only: waiting is what retry-after asks for
    assert (client.stats.attempts, client.stats.retries, client.stats.rate_limited) == (3, 2, 2)


def test_500_is_retried(server: FakeLLMServer) -> None:
    server.configure(p500=1.0, max_faults_per_key=1)
    client = make_client(server)
    call(client)
    assert [e["status"] for e in server.log()] == [500, 200]
    assert (client.stats.retries, client.stats.server_errors) == (1, 1)


def test_persistent_500_gives_up_after_max_attempts(server: FakeLLMServer) -> None:
    server.configure(p500=1.0)
    client = make_client(server, max_attempts=3)
    with pytest.raises(LLMError) as info:
        call(client)
    assert (info.value.kind, info.value.status, info.value.attempts) == ("server", 500, 3)
    assert server.stats()["requests"] == 3 and client.stats.failures == 1


def test_400_is_not_retried_and_surfaces_as_llm_error(server: FakeLLMServer) -> None:
    server.configure(p400=1.0)
    client = make_client(server)
    with pytest.raises(LLMError, match="HTTP 400") as info:
        call(client)
    assert (info.value.kind, info.value.status, info.value.attempts) == ("client", 400, 1)
    assert server.stats()["requests"] == 1


def test_wrong_key_401_is_not_retried(server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 401 is the job's configuration, not the call's outcome: KeyRefused, naming the variable (never the key),
    and the client sends nothing more."""
    server.configure(require_key="right")
    monkeypatch.setenv("RISE_TEST_KEY", "wrong-key-value")
    client = make_client(server, api_key_env="RISE_TEST_KEY")
    with pytest.raises(KeyRefused) as info:
        call(client)
    assert "$RISE_TEST_KEY (HTTP 401" in str(info.value) and "wrong-key-value" not in str(info.value)
    with pytest.raises(KeyRefused):
        call(client)
    assert server.stats()["requests"] == 1
    monkeypatch.setenv("RISE_TEST_KEY", "right")
    assert call(make_client(server, api_key_env="RISE_TEST_KEY")).text


def test_hang_times_out_and_is_retried(server: FakeLLMServer) -> None:
    server.configure(p_hang=1.0, max_faults_per_key=1, hang_s=30)
    client = make_client(server, timeout_s=0.3)
    assert '"sections"' in call(client).text
    assert (client.stats.timeouts, client.stats.retries) == (1, 1)
    assert [e["fault"] for e in server.log()] == [None]  # requests are logged when they end...
    assert server.stats()["in_flight"] == 1  # ...and the hung one is still hanging (until shutdown)


def test_empty_choices_are_retried_and_their_tokens_still_billed(server: FakeLLMServer) -> None:
    server.configure(p_empty=1.0, max_faults_per_key=1)
    client = make_client(server)
    reply = call(client)
    log = server.log()
    assert [e["fault"] for e in log] == ["empty", None]
    assert reply.input_tokens == sum(e["prompt_tokens"] for e in log)
    assert client.stats.bad_replies == 1


def test_malformed_content_is_returned_for_the_caller_to_judge(server: FakeLLMServer) -> None:
    import json

    server.configure(p_malformed=1.0)
    client = make_client(server)
    reply = call(client)
    with pytest.raises(json.JSONDecodeError):
        json.loads(reply.text)
    assert client.stats.attempts == 1


def test_missing_key_fails_fast_for_a_remote_url_but_not_for_localhost(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RISE_TEST_NO_KEY", raising=False)
    with pytest.raises(ConfigError, match="RISE_TEST_NO_KEY"):
        LLMClient(LLMConfig(base_url="https://api.example.com/v1", api_key_env="RISE_TEST_NO_KEY"))
    assert client_from_config(LLMConfig(base_url="http://127.0.0.1:9/v1", api_key_env="RISE_TEST_NO_KEY"))


def max_in_window(times: list[float], window: float) -> int:
    times = sorted(times)
    return max(bisect.bisect_left(times, t + window) - i for i, t in enumerate(times))


def test_concurrent_calls_under_a_limiter_never_exceed_the_rate_and_survive_faults(server: FakeLLMServer) -> None:
    """30 requests per 1 s window (a scaled minute), 12 in flight, with 429s and 500s mixed in.

    Asserted from the server's log over 0.75 s windows: a grant precedes its arrival by scheduling delay only, so
    any 0.75 s of arrivals fits inside 1 s of grants unless that delay exceeds 0.25 s.
    """
    server.configure(p429=0.2, p500=0.1, max_faults_per_key=2, latency_ms=10, retry_after_ms=30)
    limiter = AsyncLimiter(RateLimits(rpm=30, window_s=1.0), concurrency=12)
    client = LLMClient(
        LLMConfig(base_url=server.base_url, max_attempts=4), limiter=limiter, backoff_initial_s=0.01, backoff_max_s=0.05
    )
    docs = [DOC + f"\nAppendix {i}: notes number {i} on the sample.\n" for i in range(45)]

    async def go() -> list[Reply]:
        async with client:
            return await asyncio.gather(*(client.chat(messages(d)) for d in docs))

    replies = asyncio.run(go())
    assert all('"sections"' in r.text for r in replies)
    log = server.log()
    assert len(log) == client.stats.attempts > len(docs)  # faults happened and were retried
    assert client.stats.retries == len(log) - len(docs)
    assert client.stats.rate_limited == sum(e["status"] == 429 for e in log) > 0
    assert max_in_window([e["t"] for e in log], 0.75) <= 30
    assert limiter.max_in_flight <= 12


def test_response_bodies_are_parsed_leniently_and_junk_is_retryable() -> None:
    odd = parse_body(b'{"choices": [{"message": {"content": "x", "role": "assistant"}, "finish_reason": "eos"}]}')
    assert odd["choices"][0]["message"]["content"] == "x" and "usage" not in odd  # an off-schema reply still works
    for junk in (b"<html>502</html>", b"[1, 2]"):
        with pytest.raises(UnusableReplyError):
            parse_body(junk)


def test_aiohttp_transport_behaves_the_same(server: FakeLLMServer) -> None:
    server.configure(p_hang=0.5, p429=0.5, max_faults_per_key=1, hang_s=30)
    config = LLMConfig(base_url=server.base_url, timeout_s=0.3, max_attempts=3)
    client = LLMClient(config, http_backend="aiohttp", backoff_initial_s=0.01, backoff_max_s=0.05)

    async def go() -> list[Reply]:
        async with client:
            return await asyncio.gather(*(client.chat(messages(DOC + f"\nPart {i}.\n")) for i in range(6)))

    assert all('"sections"' in r.text for r in asyncio.run(go()))
    assert client.stats.timeouts > 0 and client.stats.rate_limited > 0
    assert client.stats.retries == client.stats.timeouts + client.stats.rate_limited
    with pytest.raises(ValueError, match="http_backend"):
        LLMClient(config, http_backend="curl")
