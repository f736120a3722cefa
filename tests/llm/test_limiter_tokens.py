"""The client's rate-limit reservation counts the request with the model's tokenizer (issue 15): close to what the
fake server bills for it in o200k tokens, not the old chars/4 (which overstated English prose by 10-15%)."""

from __future__ import annotations

import asyncio

import pytest

from rise_batch.config import LLMConfig
from rise_batch.fake_llm import FakeLLMServer
from rise_batch.llm.client import LLMClient
from rise_batch.llm.limiter import AsyncLimiter
from rise_batch.llm.ratelimit import RateLimits
from tests.conftest import sample_rows

pytest.importorskip("bpe_openai")


class RecordingLimiter(AsyncLimiter):
    """The real limiter, remembering each reservation it was asked for."""

    def __init__(self) -> None:
        super().__init__(RateLimits(rpm=10_000, tpm=10_000_000), 4)
        self.reserved: list[int] = []

    async def acquire(self, est_tokens: int):
        self.reserved.append(est_tokens)
        return await super().acquire(est_tokens)


def test_reservation_is_the_o200k_count_of_the_request() -> None:
    enc = pytest.importorskip("bpe_openai").get_encoding("o200k_base")
    # documents where chars/4 is more than 10% off the real count, so the old estimate could not pass
    docs = [
        t for r in sample_rows(40) if 8_000 < len(t := r["text"]) < 60_000 and len(t) / 4 > 1.1 * len(enc.encode(t))
    ]
    docs = docs[:4]
    limiter = RecordingLimiter()
    with FakeLLMServer() as server:
        config = LLMConfig(base_url=server.base_url, model="gpt-5.4-nano", max_output_tokens=1000)

        async def go() -> list[int]:
            async with LLMClient(config, limiter=limiter) as client:
                replies = [
                    await client.chat([{"role": "user", "content": f"<document>\n{d}\n</document>"}]) for d in docs
                ]
            return [r.input_tokens for r in replies]

        billed = asyncio.run(go())
    assert len(docs) == 4
    for reserved, paid, doc in zip(limiter.reserved, billed, docs, strict=True):
        estimate = reserved - 1000  # the reservation adds max_completion_tokens
        assert abs(estimate / paid - 1) < 0.06, (estimate, paid, len(doc) / 4)
