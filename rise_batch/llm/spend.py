"""A dollar limit on model calls: the arithmetic every capped command shares (pure: no Ray, no network).

A run's limit is on its *total*: what its outputs already record (earlier invocations, resumes) plus what this one
spends. Before a request is sent, its worst case is reserved (`worst_case_usd`: its input tokens at the full input
price plus `max_output_tokens` at the output price); the reply settles the reservation with what it really cost.
A request whose worst case does not fit beside the reservations in flight waits for them to settle (`admit`: a
worst case is usually far above what a reply costs); one that would pass the limit even then trips the budget,
which stays tripped: every later request is refused with `BudgetExceeded`. Spent plus reserved never passes the
limit, so requests in flight cannot pass it either. (Structuring's per-document guard trips at once instead:
`reserve`.)

`CostBudget` is that arithmetic in one process. A run on Ray shares one through a small actor
(rise_batch.llm.limiter_actor.BudgetActor), whose worker side has the same `reserve` / `settle` methods; the
LLM client takes either (`LLMClient(budget=...)`).

`BudgetExceeded` derives from BaseException on purpose: code that turns any `Exception` of a call into the
outcome of a document or a query must not do so for a spent budget, which is a property of the run. It must reach
the loop that schedules work, which stops starting new work and leaves what was cut resumable. The CLI and the job
scripts exit with EXIT_BUDGET (`rise_batch.errors.run_main`).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import Any

from rise_batch.errors import EXIT_BUDGET, CleanExit, ConfigError
from rise_batch.llm.pricing import PriceTable
from rise_batch.types import Reply

# a provider's tokenizer and ours can disagree a little (framing, a model counted by chars/4): the input side of a
# reservation is this much above our count, so that a reservation is a worst case
INPUT_MARGIN = 1.10
INPUT_SLACK_TOKENS = 64
ADMIT_POLL_S = 0.05  # how often a request waiting for reservations in flight to settle asks again


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


class CostLimitReached(CleanExit, Exception):
    """A capped command stopped at its limit, all it paid recorded: the message (a whole sentence, built by the
    command) names what was spent and how to go on. Exits EXIT_BUDGET, as BudgetExceeded does."""

    exit_code = EXIT_BUDGET


class CostBudget:
    """Spent + reserved dollars against a limit, in one process. `share`: this worker's own limit, when the run's
    is split among workers that cannot ask one another (structuring's Ray actors)."""

    def __init__(self, limit_usd: float, spent_usd: float = 0.0, share: float | None = None) -> None:
        self.limit, self.spent, self.reserved, self.share = limit_usd, spent_usd, 0.0, share
        self.tripped: BudgetExceeded | None = None

    def reserve(self, estimate: float, *, force: bool = False) -> None:
        """Hold `estimate` dollars for a request about to be sent, or raise BudgetExceeded (then and ever after).
        `force`: hold it without asking (a follow-up of a request already paid for)."""
        if not force:
            cap = self.limit if self.share is None else self.share
            if self.tripped is None and self.spent + self.reserved + estimate > cap:
                self.tripped = BudgetExceeded(self.limit, self.spent + self.reserved, estimate, self.share)
            if self.tripped is not None:
                raise self.tripped
        self.reserved += estimate

    def try_reserve(self, estimate: float) -> bool:
        """Hold `estimate` dollars if they fit beside what is spent and held (True); False when they would fit once
        the requests in flight have settled (ask again then); BudgetExceeded when they would not fit even then."""
        if self.tripped is None and self.spent + estimate > self.limit:
            self.tripped = BudgetExceeded(self.limit, self.spent + self.reserved, estimate)
        if self.tripped is not None:
            raise self.tripped
        if self.spent + self.reserved + estimate > self.limit:
            return False
        self.reserved += estimate
        return True

    async def admit(self, estimate: float) -> None:
        """`try_reserve`, waiting while requests in flight hold what this one needs: a worst case held by a reply
        that settles far below it is freed, so the limit is used up to the last call that can still fit."""
        while not self.try_reserve(estimate):
            await asyncio.sleep(ADMIT_POLL_S)

    def settle(self, estimate: float, actual: float) -> None:
        """The request's reply (or failure) came: its reservation becomes what it really cost."""
        self.reserved -= estimate
        self.spent += actual

    def state(self) -> dict[str, Any]:
        return {
            "limit": self.limit,
            "spent": self.spent,
            "reserved": self.reserved,
            "tripped": self.tripped is not None,
        }

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


def worst_case_usd(prices: Any, model: str, input_tokens: int, max_output_tokens: int, *, batch: bool = False) -> float:
    """The most a request can cost: its input (with a margin for tokenizer differences) at the full input price,
    none of it cached, and `max_output_tokens` of output."""
    worst_in = math.ceil(input_tokens * INPUT_MARGIN) + INPUT_SLACK_TOKENS
    return prices.cost(model, worst_in, 0, max_output_tokens, batch=batch)


def require_cap_price(model: str, prices_file: str | None, max_cost_usd: float | None, max_output_tokens: Any) -> None:
    """Refuse a capped run whose model has no price (every reply would cost $0 and the limit would never hold) or
    whose replies have no token cap (no worst case to reserve). Nothing is read or paid before this check."""
    if max_cost_usd is None:
        return
    PriceTable.load([prices_file] if prices_file else []).require(model, f"--max-cost {max_cost_usd:g}")
    if not max_output_tokens:
        raise ConfigError(
            f"--max-cost {max_cost_usd:g} needs a cap on each reply's tokens (--max-output-tokens, config key "
            "llm.max_output_tokens): it is what each call reserves before it is sent"
        )
