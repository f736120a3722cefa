"""One rate limiter for a whole job: a named Ray actor holding the pure RateLimiter arithmetic.

Every worker's AsyncLimiter keeps its own concurrency slots but asks this actor for rate admission, so requests
and tokens per minute hold across all actors of a job, a 429 seen by one worker cools down all of them, and usage
reported by a reply trues up the shared budget. The actor is tiny (num_cpus=0) and named after the run, so a
resubmitted driver or a replacement worker finds the same one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ray

from rise_batch.config import LLMConfig
from rise_batch.llm.limiter import AsyncLimiter
from rise_batch.llm.ratelimit import Lease, RateLimiter, RateLimits

NAMESPACE = "rise_batch"


@ray.remote(num_cpus=0, max_restarts=-1)
class LimiterActor:
    def __init__(self, limits: RateLimits) -> None:
        self.rate = RateLimiter(limits)

    def reserve(self, est_tokens: int) -> Lease | float:
        return self.rate.reserve(est_tokens)

    def settle(self, lease: Lease, actual_tokens: int) -> None:
        self.rate.settle(lease, actual_tokens)

    def penalize(self, seconds: float) -> None:
        self.rate.penalize(seconds)

    def observe(self, headers: Mapping[str, str] | None) -> None:
        self.rate.observe(headers)

    def snapshot(self) -> dict[str, Any]:
        return self.rate.snapshot()


class _RemoteRate:
    """The RateLimiter interface, answered by the actor (ObjectRefs are awaitable, AsyncLimiter awaits them)."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def reserve(self, est_tokens: int):
        return self.actor.reserve.remote(est_tokens)

    def settle(self, lease: Lease, actual_tokens: int):
        return self.actor.settle.remote(lease, actual_tokens)

    def penalize(self, seconds: float):
        return self.actor.penalize.remote(seconds)

    def observe(self, headers: Mapping[str, str] | None):
        return self.actor.observe.remote(dict(headers) if headers else None)


def limiter_name(run_hash: str) -> str:
    return f"rise-limiter-{run_hash}"


def start_limiter(llm: LLMConfig, run_hash: str) -> tuple[str, Any]:
    """Create (or find) the job's limiter actor: its name (what workers look it up by) and the handle.

    The driver must hold the handle for the whole job: a named actor nobody references is reclaimed.
    """
    name = limiter_name(run_hash)
    handle = LimiterActor.options(name=name, namespace=NAMESPACE, get_if_exists=True).remote(
        RateLimits(rpm=llm.rpm, tpm=llm.tpm, window_s=llm.limit_window_s, adapt=True)
    )
    ray.get(handle.snapshot.remote())  # started before any worker looks it up
    return name, handle


def RemoteLimiter(name: str, concurrency: int = 32) -> AsyncLimiter:  # noqa: N802 - reads as a type at call sites
    """A worker-side limiter: local concurrency slots, cluster-wide rate admission."""
    actor = ray.get_actor(name, namespace=NAMESPACE)
    return AsyncLimiter(concurrency=concurrency, rate=_RemoteRate(actor))
