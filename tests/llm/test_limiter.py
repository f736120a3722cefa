"""AsyncLimiter: sleeps exactly as the pure limiter says, bounds concurrency, accepts awaitable rate objects."""

from __future__ import annotations

import asyncio

from rise_batch.llm.limiter import AsyncLimiter
from rise_batch.llm.ratelimit import Lease, RateLimiter, RateLimits


class VirtualTime:
    """A clock that only moves when a coroutine sleeps: rate arithmetic runs in virtual minutes, instantly."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


def test_grants_follow_the_rate_in_virtual_time() -> None:
    clock = VirtualTime()
    limiter = AsyncLimiter(concurrency=4, rate=RateLimiter(RateLimits(rpm=60), clock), sleep=clock.sleep)
    granted: list[float] = []

    async def worker() -> None:
        lease = await limiter.acquire(100)
        granted.append(clock.now)
        await limiter.release(lease, 120, {})

    async def go() -> None:
        await asyncio.gather(*(worker() for _ in range(150)))

    asyncio.run(go())
    assert len(granted) == 150
    times = sorted(granted)
    assert max(sum(t <= x < t + 60 for x in times) for t in times) <= 60
    assert 89 <= times[-1] <= 150  # 150 requests at 60/min with a 1 s burst take about 1.5 minutes
    assert limiter.waited_s > 0


def test_concurrency_is_bounded_and_slots_come_back() -> None:
    limiter = AsyncLimiter(concurrency=3)
    peak = 0

    async def worker() -> None:
        nonlocal peak
        lease = await limiter.acquire(1)
        peak = max(peak, limiter.in_flight)
        await asyncio.sleep(0.001)
        await limiter.release(lease)

    async def go() -> None:
        await asyncio.gather(*(worker() for _ in range(30)))

    asyncio.run(go())
    assert peak == 3 == limiter.max_in_flight and limiter.in_flight == 0


def test_cancelled_waiter_gives_its_slot_back() -> None:
    clock = VirtualTime()

    async def go() -> None:
        limiter = AsyncLimiter(concurrency=1, rate=RateLimiter(RateLimits(rpm=1), clock))
        first = await limiter.acquire(1)
        waiter = asyncio.create_task(limiter.acquire(1))  # blocked by the rate: real sleep of ~60 s
        await asyncio.sleep(0.01)
        await limiter.release(first)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        assert limiter.in_flight == 0 and not limiter._slots.locked()

    asyncio.run(go())


def test_penalty_and_awaitable_rate_objects() -> None:
    clock = VirtualTime()

    class AwaitableRate:
        """Shaped like an adapter over a remote limiter: every method returns an awaitable."""

        def __init__(self) -> None:
            self.inner = RateLimiter(RateLimits(rpm=600), clock)
            self.settled: list[int] = []

        async def reserve(self, est: int) -> Lease | float:
            return self.inner.reserve(est)

        async def settle(self, lease: Lease, actual: int) -> None:
            self.settled.append(actual)

        async def penalize(self, seconds: float) -> None:
            self.inner.penalize(seconds)

        async def observe(self, headers: dict[str, str]) -> None:
            self.inner.observe(headers)

    rate = AwaitableRate()
    limiter = AsyncLimiter(rate=rate, sleep=clock.sleep)

    async def go() -> float:
        lease = await limiter.acquire(10)
        await limiter.penalize(30.0)
        await limiter.release(lease, 42, {"x-ratelimit-remaining-requests": "5"})
        await limiter.acquire(10)
        return clock.now

    assert asyncio.run(go()) == 30.0  # the next grant waited out the cool-down
    assert rate.settled == [42]
