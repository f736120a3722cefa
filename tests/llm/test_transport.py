"""The Transport registry: a transport added in one place is validated, retried and wrapped like the built-in ones."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import pytest

from rise_batch.config import ConfigError, LLMConfig
from rise_batch.llm import transport as registry
from rise_batch.llm.client import LLMClient
from rise_batch.llm.errors import LLMError, StatusError, TransportConnectionError, TransportTimeout
from rise_batch.llm.responses import ResponsesTransport
from rise_batch.llm.retry import classify
from rise_batch.llm.transport import CHAT_PATH, TRANSPORTS, Transport, make_transport
from rise_batch.registry import TransportEntry
from tests.conftest import REPO

REPLY = {
    "model": "gpt-5.4-nano",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 4}},
}
MESSAGES = [{"role": "user", "content": "hi"}]


class Canned:
    """A transport that answers from a script: each entry is an exception to raise or a body to return."""

    def __init__(self, config: LLMConfig, script: list[Any]) -> None:
        self.config, self.script, self.sent, self.closed = config, list(script), [], False

    async def post(self, path: str, body: dict[str, Any], timeout: float | None = None) -> tuple[bytes, dict]:
        self.sent.append((path, body, timeout))
        step = self.script.pop(0) if self.script else REPLY
        if isinstance(step, BaseException):
            raise step
        return json.dumps(step).encode(), {"x-ratelimit-remaining-requests": "9"}

    async def aclose(self) -> None:
        self.closed = True


def register(monkeypatch: pytest.MonkeyPatch, script: list[Any]) -> list[Canned]:
    made: list[Canned] = []

    def factory(config: LLMConfig) -> Canned:
        made.append(Canned(config, script))
        return made[-1]

    monkeypatch.setitem(TRANSPORTS, "canned", TransportEntry(name="canned", factory=factory, help="a test's script"))
    return made


def client(api: str = "chat", **options: Any) -> LLMClient:
    options = {"base_url": "http://127.0.0.1:9/v1", "http_backend": "canned", "max_attempts": 3, **options}
    config = LLMConfig(**options)
    return LLMClient(config, api=api, backoff_initial_s=0.001, backoff_max_s=0.002, cooldown_s=0.0)


def chat(c: LLMClient) -> Any:
    async def go() -> Any:
        async with c:
            return await c.chat(MESSAGES)

    return asyncio.run(go())


def test_the_builtin_transports_are_registered_and_validated_from_the_registry(monkeypatch) -> None:
    assert list(TRANSPORTS) == ["httpx", "aiohttp", "direct"] and list(registry.APIS) == ["chat", "responses"]
    with pytest.raises(ConfigError, match="llm.http_backend must be 'httpx', 'aiohttp' or 'direct', got 'canned'"):
        LLMConfig(http_backend="canned").validate()
    register(monkeypatch, [])
    LLMConfig(http_backend="canned").validate()  # one registry line makes a name valid
    with pytest.raises(ValueError, match="http_backend"):
        make_transport(LLMConfig(), http_backend="curl")
    with pytest.raises(ValueError, match="api must be 'chat' or 'responses'"):
        make_transport(LLMConfig(), api="completions")


def test_a_registered_transport_carries_the_calls_with_stats_and_cost(monkeypatch) -> None:
    made = register(monkeypatch, [])
    c = client()
    reply = chat(c)
    assert isinstance(made[0], Transport) and made[0].closed
    assert [(p, b["messages"]) for p, b, _ in made[0].sent] == [(CHAT_PATH, MESSAGES)]
    assert (reply.text, reply.input_tokens, reply.cached_input_tokens, reply.output_tokens) == ("ok", 10, 4, 2)
    assert reply.cost_usd > 0 and c.stats.attempts == c.stats.calls == 1


def test_transport_failures_are_retried_as_the_policy_says(monkeypatch) -> None:
    rate_limited = StatusError("Error code: 429", status_code=429, headers={"retry-after-ms": "1"})
    script = [rate_limited, TransportTimeout("Request timed out."), TransportConnectionError("refused")]
    register(monkeypatch, script)
    c = client(max_attempts=4)
    assert chat(c).text == "ok"
    s = c.stats
    assert (s.attempts, s.retries, s.rate_limited, s.timeouts, s.connection_errors) == (4, 3, 1, 1, 1)


def test_a_client_error_fails_at_once_with_its_status_and_text(monkeypatch) -> None:
    register(monkeypatch, [StatusError("Error code: 400 - context too long", status_code=400)])
    c = client()
    with pytest.raises(LLMError) as caught:
        chat(c)
    assert (caught.value.kind, caught.value.status, caught.value.attempts) == ("client", 400, 1)
    assert str(caught.value) == "HTTP 400 client after 1 attempt(s): Error code: 400 - context too long"
    assert c.stats.client_errors == c.stats.failures == 1


def test_the_errors_classify_as_the_sdk_errors_did() -> None:
    assert classify(StatusError("x", status_code=429, headers={"retry-after": "2"})) == (True, "rate-limit", 429, 2.0)
    assert classify(StatusError("x", status_code=503)) == (True, "server", 503, None)
    assert classify(StatusError("x", status_code=404)) == (False, "client", 404, None)
    assert classify(TransportTimeout("t")).kind == "timeout"
    assert classify(TransportConnectionError("c")).kind == "connection"


@pytest.mark.parametrize(
    "content",
    [
        b'{"error": {"message": "Rate limit reached", "type": "requests"}}',
        b'{"error": {"message": ""}}',
        b'{"message": "flat"}',
        b"[1, 2]",
        b"<html>502 Bad Gateway</html>",
        b"  ",
        b"",
    ],
)
def test_status_errors_read_as_the_sdk_words_them(content: bytes) -> None:
    """The direct transport must record the same error text as the SDK path (`str(LLMError)` lands in outputs)."""
    import openai

    try:
        import httpx2 as httpx
    except ImportError:  # pragma: no cover
        import httpx

    sdk = openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="k")
    for status in (400, 429, 500):
        request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
        response = httpx.Response(status, headers={"retry-after": "1"}, content=content, request=request)
        expected = sdk._make_status_error_from_response(response)  # pinned against the SDK's private builder
        ours = StatusError.from_response(status, {"retry-after": "1"}, content)
        assert str(ours) == str(expected) and ours.status_code == expected.status_code
        assert classify(ours) == classify(expected)


def test_the_responses_api_wraps_any_transport(monkeypatch) -> None:
    reply = {
        "id": "resp_1",
        "model": "gpt-5.4-nano",
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e", "status": "done"},
            {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": "{}"},
        ],
        "usage": {"input_tokens": 7, "output_tokens": 3, "input_tokens_details": {"cached_tokens": 0}},
    }
    made = register(monkeypatch, [reply])
    c = client(api="responses")
    assert isinstance(c.transport, ResponsesTransport) and c.transport.inner is made[0]

    async def go() -> Any:
        async with c:
            return await c.complete(MESSAGES)

    done = asyncio.run(go())
    path, body, _ = made[0].sent[0]
    assert path == "/responses" and body["input"] == [{"role": "user", "content": "hi"}] and body["store"] is False
    assert done.completion.choices[0].message.tool_calls[0].id == "c1" and done.reply.input_tokens == 7
    assert c.transport.reasoning["c1"] == [{"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"}]
    assert made[0].closed


@pytest.mark.parametrize("module", ["rise_batch.llm.errors", "rise_batch.llm.transport", "rise_batch.agent.loop"])
def test_the_errors_and_the_registry_load_no_http_stack(module: str) -> None:
    heavy = ("openai", "tenacity", "aiohttp", "httpx")
    code = f"import sys, {module}; print(','.join(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == ""
