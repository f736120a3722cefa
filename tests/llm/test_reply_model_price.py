"""A provider that answers under a model name of its own (a deployment alias) is priced as the model requested.

The server here is not the project's fake: a bare stdlib HTTP server, as a foreign OpenAI-compatible endpoint
(vLLM, a proxy, an Azure deployment) would answer, with a `model` field the price table does not know.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rise_batch.config import LLMConfig
from rise_batch.llm.batch import reply_from_body
from rise_batch.llm.client import LLMClient
from rise_batch.llm.pricing import PriceTable

REPLY = {
    "id": "x",
    "object": "chat.completion",
    "model": "acme-deployment-7",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "{}"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1000, "completion_tokens": 200, "prompt_tokens_details": {"cached_tokens": 0}},
}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps(REPLY).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def foreign_server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize("http_backend", ["httpx", "direct"])
def test_an_unpriced_reply_model_is_priced_as_the_requested_model(foreign_server: str, http_backend: str) -> None:
    cfg = LLMConfig(base_url=foreign_server, model="gpt-5.4-nano", http_backend=http_backend, timeout_s=5.0)

    async def go():
        async with LLMClient(cfg) as client:
            return await client.chat([{"role": "user", "content": "hi"}])

    reply = asyncio.run(go())
    nano = PriceTable.load().find("gpt-5.4-nano")
    assert nano is not None
    assert reply.model == "acme-deployment-7"
    assert reply.cost_usd == pytest.approx((1000 * nano.input + 200 * nano.output) / 1e6)
    assert reply.cost_usd > 0


def test_batch_result_lines_fall_back_to_the_requested_model_too() -> None:
    prices = PriceTable.load()
    nano = prices.find("gpt-5.4-nano")
    reply = reply_from_body(REPLY, prices, "gpt-5.4-nano", batch=True)
    assert reply.cost_usd == pytest.approx((1000 * nano.input + 200 * nano.output) / 1e6 * prices.batch_discount)


def test_a_known_reply_model_keeps_its_own_price() -> None:
    prices = PriceTable.load()
    mini, nano = prices.find("gpt-5.4-mini"), prices.find("gpt-5.4-nano")
    assert mini != nano
    assert prices.cost("gpt-5.4-mini", 1000, 0, 0, requested="gpt-5.4-nano") == pytest.approx(mini.input / 1000)
