"""`--max-cost` for a job of many workers: the driver's side of one dollar limit, shared by every model call.

`CostCap(limit, recorded)` is what a driver (a run, a judging, a sweep holding one cap for all of its cells and its
judging) keeps: the limit, and a function that sums the dollars its outputs already record (earlier invocations,
resumes, cut trajectories' earlier spend), asked afresh whenever a stage starts, so the limit is on the total.
`services(kind)` hands the stage's workers the budget they share: in process a `CostBudget` object, on Ray the
name of a `BudgetActor` on the driver's node (held by the driver until the stage is done). A worker turns what it
was handed into the budget its LLM client reserves from with `worker_budget`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rise_batch.llm.spend import BudgetExceeded, CostBudget

BUDGET = "budget"  # the key of a stage's services


class CostCap:
    """One dollar limit over everything a driver runs: `recorded()` is the spend its outputs already hold."""

    def __init__(self, limit_usd: float, recorded: Callable[[], float]) -> None:
        self.limit, self.recorded = limit_usd, recorded

    def check(self) -> float:
        """What the outputs record, or BudgetExceeded when that leaves nothing to spend (nothing is started)."""
        spent = self.recorded()
        if spent >= self.limit:
            raise BudgetExceeded(self.limit, spent, 0.0)
        return spent

    def services(self, kind: str) -> tuple[dict[str, Any], Any]:
        """({"budget": what a worker reserves from}, the handle the driver holds until the stage is done)."""
        spent = self.check()
        if kind == "local":
            budget = CostBudget(self.limit, spent)
            return {BUDGET: budget}, budget
        from rise_batch.llm.limiter_actor import start_budget  # lazy: loads ray (Ray runs only)

        name, handle = start_budget(self.limit, spent)
        return {BUDGET: name}, handle


class HeldCap(CostCap):
    """One budget started once and handed to every stage of a driver that runs several at once (a sweep's queue of
    trajectories and its judgings beside it): each reserves from the same ledger, so the limit holds on their sum.
    `kind` is where it lives ("local": a CostBudget here; else a BudgetActor, held by this object). BudgetExceeded
    at construction when the records already reach the limit."""

    def __init__(self, limit_usd: float, recorded: Callable[[], float], kind: str) -> None:
        super().__init__(limit_usd, recorded)
        self.names, self.handle = CostCap.services(self, kind)

    def services(self, kind: str) -> tuple[dict[str, Any], Any]:
        return dict(self.names), None

    def tripped(self) -> bool:
        """Whether a call was refused (asked of the actor on Ray)."""
        if isinstance(self.handle, CostBudget):
            return self.handle.tripped is not None
        from rise_batch.llm.limiter_actor import budget_state  # lazy: loads ray (Ray runs only)

        return bool(budget_state(self.handle)["tripped"])


def worker_budget(services: dict[str, Any]) -> Any:
    """The budget a worker's client reserves from: the in-process CostBudget, a RemoteBudget over the job's actor
    when it was handed a name, None without a limit."""
    handed = services.get(BUDGET)
    if isinstance(handed, str):
        from rise_batch.llm.limiter_actor import RemoteBudget  # lazy: loads ray (Ray runs only)

        return RemoteBudget(handed)
    return handed


def join_services(*parts: tuple[dict[str, Any], Any]) -> tuple[dict[str, Any], Any]:
    """Several services of one stage (the rate limiter, the budget) as one: the names merged, the handles kept."""
    names: dict[str, Any] = {}
    for n, _ in parts:
        names.update(n)
    return names, tuple(h for _, h in parts)
