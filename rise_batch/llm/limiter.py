"""The asyncio side of rate limiting: sleep as the pure limiter says, and bound requests in flight.

The client only knows the three-method `Limiter` protocol, so the limiter behind it can be this in-process one or a
cluster-wide one (a Ray actor shared by every worker of a job) without the client changing. `AsyncLimiter` also
accepts any rate object whose `reserve/settle/penalize/observe` return awaitables (e.g. a thin adapter over a Ray
actor's `.remote()` calls), so a cluster-wide limiter only has to provide the arithmetic, which already exists.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from rise_batch.llm.ratelimit import Lease, RateLimiter, RateLimits


class Limiter(Protocol):
    """What LLMClient needs: one lease per HTTP attempt, released with the usage and headers of the reply."""

    async def acquire(self, est_tokens: int) -> Lease: ...

    async def release(
        self, lease: Lease, actual_tokens: int | None = None, headers: Mapping[str, str] | None = None
    ) -> None: ...

    async def penalize(self, seconds: float) -> None: ...


async def _resolve(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class AsyncLimiter:
    """Concurrency slots (a semaphore) in front of a rate limiter; waiters are served first come, first served.

    `rate` defaults to a pure RateLimiter built from `limits` (no limits = concurrency bound only). Waiting for the
    rate happens under one lock, so a queue of waiters sleeps one at a time instead of a thundering herd polling.
    """

    def __init__(
        self,
        limits: RateLimits | None = None,
        concurrency: int = 32,
        *,
        rate: Any = None,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency!r}")
        self.rate = rate if rate is not None else RateLimiter(limits or RateLimits())
        self.concurrency = concurrency
        self._sleep = sleep
        self._slots = asyncio.Semaphore(concurrency)
        self._queue = asyncio.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        self.waited_s = 0.0

    async def acquire(self, est_tokens: int) -> Lease:
        await self._slots.acquire()
        try:
            async with self._queue:
                while True:
                    got = await _resolve(self.rate.reserve(est_tokens))
                    if isinstance(got, Lease):
                        break
                    self.waited_s += got
                    await self._sleep(got)
        except BaseException:
            self._slots.release()
            raise
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        return got

    async def release(
        self, lease: Lease, actual_tokens: int | None = None, headers: Mapping[str, str] | None = None
    ) -> None:
        """Give the slot back; true up the lease when the reply reported usage (a failed attempt keeps its estimate)."""
        try:
            if actual_tokens is not None:
                await _resolve(self.rate.settle(lease, actual_tokens))
            if headers is not None:
                await _resolve(self.rate.observe(dict(headers)))
        finally:
            self.in_flight -= 1
            self._slots.release()

    async def penalize(self, seconds: float) -> None:
        await _resolve(self.rate.penalize(seconds))
