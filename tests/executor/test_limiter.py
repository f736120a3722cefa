"""The job-wide limiter's batched admission: in virtual time against the pure arithmetic, then on a real Ray actor."""

from __future__ import annotations

import asyncio
import bisect
from typing import Any

import pytest
import ray

from rise_batch.llm.limiter import AsyncLimiter
from rise_batch.llm.limiter_actor import HOLD_S, WINDOW_SLACK_S, BatchedRate, LimiterActor
from rise_batch.llm.ratelimit import Lease, RateLimiter, RateLimits
from tests.llm.test_limiter import VirtualTime


class _Ready:
    """An already-computed `.remote()` result: awaitable, and harmless when never awaited (fire-and-forget)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __await__(self):
        return self.value
        yield  # noqa: B901 - makes this a generator, as __await__ must be


class _Method:
    def __init__(self, fn) -> None:
        self.fn = fn

    def remote(self, *args: Any) -> _Ready:
        return _Ready(self.fn(*args))


class FakeActor:
    """LimiterActor's methods, run in-process on a virtual clock, counting calls."""

    def __init__(self, limits: RateLimits, clock: VirtualTime) -> None:
        self.actor = LimiterActor.__ray_metadata__.modified_class(limits)
        self.actor.rate = RateLimiter(limits, clock)
        self.calls = 0

    def __getattr__(self, name: str) -> _Method:
        method = getattr(self.actor, name)

        def counted(*args: Any) -> Any:
            self.calls += 1
            return method(*args)

        return _Method(counted)


def max_in_window(times: list[float], window: float) -> int:
    times = sorted(times)
    return max(bisect.bisect_left(times, t + window) - i for i, t in enumerate(times))


def run_requests(limiter: AsyncLimiter, clock: VirtualTime, n: int, step: float, tokens: int) -> list[float]:
    """n requests, each costing its worker `step` virtual seconds; returns when each was admitted."""
    used: list[float] = []

    async def request() -> None:
        lease = await limiter.acquire(tokens)
        used.append(clock.now)
        clock.now += step  # one worker's event loop: request handling is serial
        await asyncio.sleep(0)
        await limiter.release(lease, tokens // 2, {})

    async def go() -> None:
        await asyncio.gather(*(request() for _ in range(n)))

    asyncio.run(go())
    return used


def test_batches_hold_the_limit_by_use_time() -> None:
    clock = VirtualTime()
    window, rpm = 60.0, 600
    actor = FakeActor(RateLimits(rpm=rpm, window_s=window + WINDOW_SLACK_S), clock)
    rate = BatchedRate(actor, max_batch=32, clock=clock)
    used = run_requests(AsyncLimiter(concurrency=32, rate=rate, sleep=clock.sleep), clock, 1500, 0.01, 1000)
    assert len(used) == 1500
    assert max_in_window(used, window) <= rpm  # by the time leases are used, not granted
    assert max_in_window(used, window) >= 0.95 * rpm  # and the limit is used, not wasted


def test_unlimited_flow_fetches_in_batches() -> None:
    clock = VirtualTime()
    actor = FakeActor(RateLimits(), clock)
    rate = BatchedRate(actor, max_batch=32, clock=clock)
    used = run_requests(AsyncLimiter(concurrency=32, rate=rate, sleep=clock.sleep), clock, 2000, 0.002, 100)
    assert len(used) == 2000 and rate.fetches < 2000 / 10 and actor.calls == rate.fetches


def test_leases_not_used_in_time_give_their_tokens_back() -> None:
    clock = VirtualTime()
    actor = FakeActor(RateLimits(tpm=100_000_000), clock)
    rate = BatchedRate(actor, max_batch=16, clock=clock)
    for _ in range(20):  # a steady flow: the next fetch asks for a batch
        clock.now += 0.005
        lease = asyncio.run(_resolve(rate.reserve(1000)))
        rate.settle(lease, 1000)
    held = len(rate._held)
    assert held > 0
    clock.now += HOLD_S * 2
    tokens_before = actor.actor.rate.snapshot()["tokens_in_window"]
    asyncio.run(_resolve(rate.reserve(1000)))  # expires the held ones; they ride along with this fetch
    after = actor.actor.rate.snapshot()["tokens_in_window"]
    fetched = 1 + len(rate._held)  # the new batch: this request's lease and the ones held for the next
    assert after == tokens_before - held * 1000 + fetched * 1000  # the expired leases' estimates were freed


def test_a_429_returns_held_leases_and_cools_everyone_down() -> None:
    clock = VirtualTime()
    actor = FakeActor(RateLimits(rpm=10_000), clock)
    rate = BatchedRate(actor, max_batch=8, clock=clock)
    for _ in range(6):
        clock.now += 0.002
        asyncio.run(_resolve(rate.reserve(10)))
    assert rate._held
    asyncio.run(_resolve(rate.penalize(5.0)))
    assert not rate._held and actor.actor.rate.cooldown_until == pytest.approx(clock.now + 5.0)
    assert isinstance(asyncio.run(_resolve(rate.reserve(10))), float)  # the cool-down answers the next fetch


async def _resolve(value: Any) -> Any:
    return await value if hasattr(value, "__await__") else value


def test_two_workers_share_one_real_actor(ray_local) -> None:
    """Two workers' limiters (as in two actors) against one LimiterActor: the shared limit holds by use time."""
    from rise_batch.config import LLMConfig
    from rise_batch.llm.limiter_actor import RemoteLimiter, start_limiter

    name, handle = start_limiter(LLMConfig(rpm=60, tpm=10**9, limit_window_s=1.0), "test-batched")
    limiters = [RemoteLimiter(name, concurrency=16) for _ in range(2)]
    used: list[float] = []

    async def request(limiter: AsyncLimiter) -> None:
        lease = await limiter.acquire(100)
        used.append(asyncio.get_running_loop().time())
        await asyncio.sleep(0.01)
        await limiter.release(lease, 80, {})

    async def go() -> None:
        await asyncio.gather(*(request(limiters[i % 2]) for i in range(150)))

    asyncio.run(go())
    fetches = sum(lim.rate.fetches for lim in limiters)
    assert len(used) == 150
    assert max_in_window(used, 1.0) <= 60
    assert fetches < 150
    ray.kill(handle)


def test_a_limiter_restarting_or_gone_is_asked_again_then_given_up_on() -> None:
    """ActorUnavailableError (restarting) and ActorDiedError (gone): asked again, looked up again by name, until it
    answers; past reconnect_s, LimiterUnavailable, which the client reports as a transient failure."""
    import ray

    from rise_batch.llm.errors import LimiterUnavailable

    lease = Lease(1, 1, 0.0)

    class Flaky:
        def __init__(self, failures: int) -> None:
            self.failures = failures

        @property
        def reserve_many(self) -> _Method:
            def call(*_args: Any) -> Any:
                if self.failures:
                    self.failures -= 1
                    raise ray.exceptions.ActorUnavailableError("restarting", None)
                return [lease]

            return _Method(call)

    resolved: list[Flaky] = []

    def resolve() -> Flaky:
        resolved.append(Flaky(0))
        return resolved[-1]

    rate = BatchedRate(Flaky(1), resolve=resolve)
    assert asyncio.run(rate.reserve(1)) == lease and len(resolved) == 1 and rate.reconnects == 1
    gone = BatchedRate(Flaky(10**6), reconnect_s=0.5)
    with pytest.raises(LimiterUnavailable):
        asyncio.run(gone.reserve(1))
