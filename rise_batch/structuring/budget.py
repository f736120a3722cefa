"""`--max-cost`: stop a run cleanly before its total cost would pass a limit, checkpoint intact, resumable.

The limit is on the *run's* total, across resumes: what the checkpoint already records plus what this process
spends. Online, before a document's first request is sent its worst-case cost (estimated input tokens plus
`max_output_tokens`) is reserved; if spent + reserved + that would pass the limit, the budget trips and every later
first request is refused. A follow-up request of a document already paid for (the re-ask) is never refused, so no
paid reply is thrown away; only re-asks in flight when it trips can take the total past the limit. In batch mode a
whole pack is committed at once at its *expected* cost (structuring.plan.request_cost): a pack that would pass the
limit is not submitted (smaller packs, `--batch-max-requests`, give finer control).

`BudgetExceeded` derives from BaseException on purpose: the structuring backend turns any `Exception` of a
document's call into an `error` row, but running out of budget is not a property of the document. It must reach
the shard loop, which stops scheduling, keeps the rows of finished documents and leaves the shard unfinished, so
that a re-run with a higher limit resumes exactly there. The CLI and the job script exit with EXIT_BUDGET
(`rise_batch.errors.run_main`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rise_batch.errors import EXIT_BUDGET, CleanExit
from rise_batch.llm.pricing import PriceTable
from rise_batch.structuring.checkpoint import CheckpointStore
from rise_batch.structuring.plan import request_cost
from rise_batch.types import Reply


class BudgetExceeded(CleanExit, BaseException):
    exit_code = EXIT_BUDGET

    def __init__(self, limit: float, spent: float, next_cost: float, share: float | None = None) -> None:
        super().__init__(limit, spent, next_cost, share)
        self.limit, self.spent, self.next_cost, self.share = limit, spent, next_cost, share

    def __str__(self) -> str:
        whose = "the run has" if self.share is None else f"this worker (a share up to ${self.share:,.4f}) has"
        return (
            f"stopped before the cost limit: {whose} spent ${self.spent:,.4f} and the next request (up to "
            f"${self.next_cost:,.4f}) would pass --max-cost ${self.limit:,.4f}. The checkpoint is intact; re-run the "
            "same command with a higher --max-cost to continue."
        )


class CostBudget:
    """Spent + reserved dollars against a limit, in one process. Ray actors each get a `share` of what the run has
    left (the sum of shares is the limit), so no actor needs to ask another before sending a request."""

    def __init__(self, limit_usd: float, spent_usd: float = 0.0, share: float | None = None) -> None:
        self.limit, self.spent, self.reserved, self.share = limit_usd, spent_usd, 0.0, share
        self.tripped: BudgetExceeded | None = None

    def reserve(self, estimate: float, *, force: bool = False) -> None:
        if not force:
            cap = self.limit if self.share is None else self.share
            if self.tripped is None and self.spent + self.reserved + estimate > cap:
                self.tripped = BudgetExceeded(self.limit, self.spent + self.reserved, estimate, self.share)
            if self.tripped is not None:
                raise self.tripped
        self.reserved += estimate

    def settle(self, estimate: float, actual: float) -> None:
        self.reserved -= estimate
        self.spent += actual

    def guard(self, chat: Callable[[list[dict]], Awaitable[Reply]], estimate: Callable[[list[dict]], float]):
        """`chat` that reserves before each call; a conversation's later turns (len > 2) are never refused."""

        async def guarded(messages: list[dict]) -> Reply:
            cost = estimate(messages)
            self.reserve(cost, force=len(messages) > 2)
            paid = 0.0
            try:
                reply = await chat(messages)
                paid = reply.cost_usd
                return reply
            finally:
                self.settle(cost, paid)

        return guarded


def require_price(cfg: Any) -> None:
    """Refuse to start a --max-cost run whose model has no price: every reply would cost $0 and the limit would let
    the run spend without bound. Called by the job before the scan, so nothing is read or paid first."""
    if not cfg.calls_llm or cfg.max_cost_usd is None:
        return

    table = PriceTable.load([cfg.llm.prices_file] if cfg.llm.prices_file else [])
    table.require(cfg.llm.model, f"--max-cost {cfg.max_cost_usd:g}")


def checkpoint_cost(out_dir: str | Path) -> float:
    """Dollars already recorded in a run's checkpoint (all shards)."""
    store = CheckpointStore(out_dir)  # a damaged part is a CheckpointError naming it and the remedy
    return float(sum(sum(store.read_part(p, ["cost_usd"]).column("cost_usd").to_pylist()) for p in store.parts()))


def structuring_estimator(
    model: str, prices: Any, *, batch: bool = False, max_output_tokens: int | None = None
) -> Callable[[list[dict]], float]:
    """Cost of a request before it is sent: with `max_output_tokens`, the worst case (online reservations, so the
    limit is never passed by requests in flight); without, the expected output (a batch pack's estimate)."""
    return lambda messages: request_cost(messages, model, prices, batch=batch, output_tokens=max_output_tokens)
