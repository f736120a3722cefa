"""One rate limiter for a whole job: a named Ray actor holding the pure RateLimiter arithmetic.

Every worker's AsyncLimiter keeps its own concurrency slots but asks this actor for rate admission, so requests
and tokens per minute hold across all actors of a job, a 429 seen by one worker cools down all of them, and usage
reported by a reply trues up the shared budget. The actor is tiny (num_cpus=0) and named after the run, so a
resubmitted driver or a replacement worker finds the same one.

Losing a worker node loses nothing: the actor lives on the driver's node (hard node affinity), so it goes only when
the job's driver goes, and restarts in place (`max_restarts`, with fresh arithmetic) should its process die. A worker
whose call finds it restarting or gone asks again, looking it up by name, with backoff, for up to RECONNECT_S; only
then does the call fail, as `LimiterUnavailable` (a transient failure: left for a resume, never an outcome).

Admission is batched: a Ray call costs a millisecond or more of CPU on each side, which at one call (or three)
per request made the limiter the busiest process of a job and capped a single actor at a few hundred requests per
second. A worker asks for as many leases as it will use within HOLD_S (its recent grant rate), hands them out
locally, and gives back the ones it did not use in time; settlements and the latest `x-ratelimit-*` headers ride
along with its next call. Leases are counted when granted and used up to HOLD_S later, so the actor's window is
WINDOW_SLACK_S longer than the provider's: grants shifted by that much still never put more than the limit into
any window of the provider's length.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import ray

from rise_batch.config import LLMConfig
from rise_batch.llm.errors import LimiterUnavailable
from rise_batch.llm.limiter import AsyncLimiter
from rise_batch.llm.ratelimit import Lease, RateLimiter, RateLimits
from rise_batch.llm.spend import ADMIT_POLL_S, BudgetExceeded, CostBudget

NAMESPACE = "rise_batch"
HOLD_S = 0.1  # a worker uses a granted lease within this long, or gives it back (its request count stays spent)
WINDOW_SLACK_S = 0.25  # HOLD_S plus grant-to-arrival delays
MAX_BATCH = 64
RECONNECT_S = 120.0  # how long a worker keeps asking a restarting or vanished limiter before its call fails
LOST = (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError)


@ray.remote(num_cpus=0, max_restarts=-1)
class LimiterActor:
    def __init__(self, limits: RateLimits) -> None:
        self.rate = RateLimiter(limits)

    def reserve(self, est_tokens: int) -> Lease | float:
        return self.rate.reserve(est_tokens)

    def reserve_many(
        self,
        n: int,
        est_tokens: int,
        settled: list[tuple[Lease, int]] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> list[Lease] | float:
        """Up to `n` leases granted now (at least one), or the seconds to wait; applies what rode along first."""
        self.settle_many(settled, headers)
        leases: list[Lease] = []
        for _ in range(max(n, 1)):
            got = self.rate.reserve(est_tokens)
            if not isinstance(got, Lease):
                return leases or got
            leases.append(got)
        return leases

    def settle_many(self, settled: list[tuple[Lease, int]] | None, headers: Mapping[str, str] | None) -> None:
        for lease, actual in settled or ():
            self.rate.settle(lease, actual)
        if headers:
            self.rate.observe(headers)

    def settle(self, lease: Lease, actual_tokens: int) -> None:
        self.rate.settle(lease, actual_tokens)

    def penalize(self, seconds: float) -> None:
        self.rate.penalize(seconds)

    def observe(self, headers: Mapping[str, str] | None) -> None:
        self.rate.observe(headers)

    def snapshot(self) -> dict[str, Any]:
        return self.rate.snapshot()

    def node(self) -> str:
        return ray.get_runtime_context().get_node_id()


class BatchedRate:
    """A worker's side of the job's limiter: the RateLimiter interface, served from leases fetched in batches.

    `reserve` returns a held lease at once, or an awaitable that fetches a batch (AsyncLimiter awaits it under its
    queue lock, so a worker has at most one fetch in flight). `actor` is the LimiterActor handle; tests pass an
    object with the same `.method.remote(...)` shape. `resolve()` looks the actor up again after it was lost.
    """

    def __init__(
        self,
        actor: Any,
        max_batch: int = MAX_BATCH,
        hold_s: float = HOLD_S,
        clock: Callable[[], float] = time.monotonic,
        resolve: Callable[[], Any] | None = None,
        reconnect_s: float = RECONNECT_S,
    ) -> None:
        self.actor, self.hold_s, self.clock = actor, hold_s, clock
        self.resolve, self.reconnect_s = resolve, reconnect_s
        self.reconnects = 0  # calls asked again because the actor was restarting or gone
        self.max_batch = max(1, min(max_batch, MAX_BATCH))
        self._held: deque[tuple[float, Lease]] = deque()  # (local time of the grant, lease), oldest first
        self._settled: list[tuple[Lease, int]] = []
        self._headers: dict[str, str] | None = None
        self._grants: deque[float] = deque(maxlen=64)  # when leases were handed out: the demand estimate
        self._ests: deque[int] = deque(maxlen=64)
        self._last_sent = clock()
        self.fetches = 0  # actor calls made for admission (for tests and benchmarks)

    def reserve(self, est_tokens: int) -> Any:
        now = self.clock()
        self._ests.append(est_tokens)
        self._expire(now)
        for i, (_, lease) in enumerate(self._held):
            if lease.tokens >= est_tokens:
                del self._held[i]
                return self._grant(lease, now)
        return self._fetch(est_tokens)

    async def _fetch(self, est_tokens: int) -> Lease | float:
        now = self.clock()
        span = now - self._grants[0] if len(self._grants) > 1 else 0.0
        rate = (len(self._grants) - 1) / span if span > 0 else 0.0
        n = min(self.max_batch, 1 + int(rate * self.hold_s))
        per_lease = max(est_tokens, *self._ests) if n > 1 else est_tokens  # held leases must fit later requests
        settled, headers = self._pending()
        self.fetches += 1
        got = await self._ask("reserve_many", n, per_lease, settled, headers)
        if not isinstance(got, list):
            return got
        t = self.clock()
        self._held.extend((t, lease) for lease in got[1:])
        return self._grant(got[0], t)

    async def _ask(self, method: str, *args: Any) -> Any:
        """One awaited call to the actor, asked again (the actor looked up again by name) while it is restarting or
        gone, with backoff, for up to `reconnect_s`; then LimiterUnavailable."""
        delay, start = 0.2, self.clock()
        while True:
            try:
                return await getattr(self.actor, method).remote(*args)
            except LOST as e:
                waited = self.clock() - start
                if waited >= self.reconnect_s:
                    raise LimiterUnavailable(
                        f"the job's rate limiter did not answer for {waited:.0f} s ({type(e).__name__})"
                    ) from None
                self.reconnects += 1
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                if self.resolve is not None:
                    try:
                        self.actor = self.resolve()
                    except ValueError:  # not registered (yet): the same handle is asked again
                        pass

    def _grant(self, lease: Lease, now: float) -> Lease:
        self._grants.append(now)
        return lease

    def _expire(self, now: float) -> None:
        while self._held and self._held[0][0] + self.hold_s < now:
            self._settled.append((self._held.popleft()[1], 0))  # frees its tokens; the request stays counted

    def _pending(self) -> tuple[list[tuple[Lease, int]], dict[str, str] | None]:
        settled, headers = self._settled, self._headers
        self._settled, self._headers, self._last_sent = [], None, self.clock()
        return settled, headers

    def settle(self, lease: Lease, actual_tokens: int) -> None:
        self._settled.append((lease, actual_tokens))
        if len(self._settled) >= 256 or self.clock() - self._last_sent > 1.0:  # idle workers still true up
            self.actor.settle_many.remote(*self._pending())

    def penalize(self, seconds: float):
        """A 429: every worker must stop at once, and leases held here must not be spent into it."""
        self._settled.extend((lease, 0) for _, lease in self._held)
        self._held.clear()
        return self._ask("penalize", seconds)

    def observe(self, headers: Mapping[str, str] | None) -> None:
        limits = {k: v for k, v in (headers or {}).items() if k.lower().startswith("x-ratelimit-")}
        if limits:
            self._headers = limits


def limiter_name(run_hash: str) -> str:
    return f"rise-limiter-{run_hash}"


def start_limiter(llm: LLMConfig, run_hash: str) -> tuple[str, Any]:
    """Create (or find) the job's limiter actor: its name (what workers look it up by) and the handle.

    It is placed on this (the driver's) node, hard: a worker node lost takes none of the job's rate state with it.
    One of that name already running on another node (a detached one, a concurrent driver's) is not used: this
    driver starts its own, named after its node as well.
    The driver must hold the handle for the whole job: a named actor nobody references is reclaimed. The name is
    registered when `.remote()` returns, so workers can look it up at once; the driver does not wait for the actor's
    process to start (a second or more, which used to come before the structure workers were even created): it
    starts beside them, and their first admission calls queue until it is up.
    """
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    node = ray.get_runtime_context().get_node_id()
    name = limiter_name(run_hash)
    if not _runs_on(name, node):
        name = f"{name}-{node[:12]}"
    here = NodeAffinitySchedulingStrategy(node_id=node, soft=False)
    handle = LimiterActor.options(name=name, namespace=NAMESPACE, get_if_exists=True, scheduling_strategy=here).remote(
        RateLimits(rpm=llm.rpm, tpm=llm.tpm, window_s=llm.limit_window_s + WINDOW_SLACK_S, adapt=True)
    )
    return name, handle


def _runs_on(name: str, node: str) -> bool:
    """Is the limiter `name` absent (so it will be created here) or running on `node`?"""
    try:
        found = ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return True
    try:
        return ray.get(found.node.remote(), timeout=30) == node
    except (*LOST, ray.exceptions.GetTimeoutError, AttributeError):
        return False


def RemoteLimiter(name: str, concurrency: int = 32) -> AsyncLimiter:  # noqa: N802 - reads as a type at call sites
    """A worker-side limiter: local concurrency slots, cluster-wide rate admission."""
    actor = ray.get_actor(name, namespace=NAMESPACE)
    rate = BatchedRate(actor, max_batch=concurrency, resolve=lambda: ray.get_actor(name, namespace=NAMESPACE))
    return AsyncLimiter(concurrency=concurrency, rate=rate)


@ray.remote(num_cpus=0, max_restarts=0)
class BudgetActor:
    """One dollar limit for a whole job (rise_batch.llm.spend.CostBudget), asked by every worker before each call.

    It lives on the driver's node, like the limiter, and is never restarted: a fresh one would not know what this
    invocation spent. Should its process die, every worker's next reservation is refused (RemoteBudget), so the
    limit still holds; the job stops as it would at the limit and the next invocation counts what the outputs
    record."""

    def __init__(self, limit_usd: float, spent_usd: float) -> None:
        self.budget = CostBudget(limit_usd, spent_usd)

    def try_reserve(self, usd: float) -> bool | tuple[float, float, float]:
        """CostBudget.try_reserve: True (held) or False (ask again), or (limit, spent + reserved, usd) when it
        tripped: the worker raises BudgetExceeded."""
        try:
            return self.budget.try_reserve(usd)
        except BudgetExceeded as e:
            return e.limit, e.spent, e.next_cost

    def settle(self, reserved: float, actual: float) -> None:
        self.budget.settle(reserved, actual)

    def state(self) -> dict[str, Any]:
        return self.budget.state()


class RemoteBudget:
    """A worker's side of the job's BudgetActor: the CostBudget methods a client calls, over Ray. A refusal is
    remembered here too, so a tripped job stops asking."""

    def __init__(self, name: str) -> None:
        self.actor = ray.get_actor(name, namespace=NAMESPACE)
        self.tripped: BudgetExceeded | None = None

    async def admit(self, usd: float) -> None:
        """Hold `usd` in the job's budget, waiting while calls in flight hold what it needs (CostBudget.admit)."""
        while self.tripped is None:
            try:
                got = await self.actor.try_reserve.remote(usd)
            except LOST:  # the job's budget is gone with what it knew: nothing more is sent
                got = (float("nan"), float("nan"), usd)
            if got is True:
                return
            if got is False:
                await asyncio.sleep(ADMIT_POLL_S)
                continue
            self.tripped = BudgetExceeded(*got)
        raise self.tripped

    def settle(self, reserved: float, actual: float) -> None:
        self.actor.settle.remote(reserved, actual)  # a caller's calls reach an actor in order: after its reserve

    def reserve(self, usd: float) -> None:
        """CostBudget.reserve for a driver that holds worst cases up front (a sweep's batch-mode judging on Ray):
        held when it fits beside what is spent and held now, else BudgetExceeded. One that would fit once the
        calls in flight settle is refused too (a batch cannot wait for them), without tripping the budget."""
        if self.tripped is not None:
            raise self.tripped
        got = ray.get(self.actor.try_reserve.remote(usd), timeout=60)
        if got is True:
            return
        if got is False:
            state = ray.get(self.actor.state.remote(), timeout=60)
            raise BudgetExceeded(state["limit"], state["spent"] + state["reserved"], usd)
        self.tripped = BudgetExceeded(*got)
        raise self.tripped


def start_budget(limit_usd: float, spent_usd: float) -> tuple[str, Any]:
    """Create the job's BudgetActor on this (the driver's) node: its name (what workers look it up by) and the
    handle, which the driver holds until every worker is done. Named afresh each time: a limit is never shared
    with an earlier invocation's actor, which knew other figures."""
    import uuid

    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)
    name = f"rise-budget-{uuid.uuid4().hex[:16]}"
    handle = BudgetActor.options(name=name, namespace=NAMESPACE, scheduling_strategy=here).remote(limit_usd, spent_usd)
    return name, handle


def budget_state(handle: Any) -> dict[str, Any]:
    """The actor's figures (limit, spent, reserved, tripped), for the driver's closing line."""
    return ray.get(handle.state.remote(), timeout=60)
