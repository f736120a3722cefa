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

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rise_batch.errors import EXIT_BUDGET
from rise_batch.llm.pricing import PriceTable
from rise_batch.llm.spend import BudgetExceeded, CostBudget
from rise_batch.money.spent import spent_usd
from rise_batch.structuring.checkpoint import CheckpointStore
from rise_batch.structuring.plan import request_cost

# the cap's arithmetic lives in rise_batch.llm.spend (shared by run and judge); named here for the structuring code
__all__ = [
    "EXIT_BUDGET",
    "BudgetExceeded",
    "CostBudget",
    "checkpoint_cost",
    "require_price",
    "spent_so_far",
    "structuring_estimator",
]


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


def spent_so_far(out_dir: str | Path) -> float:
    """What the online cap starts from: all OUT has paid, as its spend journal says (money/spent.py: every call of
    every resume, those a kill left unsettled at their worst case, replies re-bought included), or what the
    checkpoint records where that is more (an OUT structured before the journal existed)."""
    return max(spent_usd(out_dir), checkpoint_cost(out_dir))


def structuring_estimator(
    model: str, prices: Any, *, batch: bool = False, max_output_tokens: int | None = None
) -> Callable[[list[dict]], float]:
    """Cost of a request before it is sent: with `max_output_tokens`, the worst case (online reservations, so the
    limit is never passed by requests in flight); without, the expected output (a batch pack's estimate)."""
    return lambda messages: request_cost(messages, model, prices, batch=batch, output_tokens=max_output_tokens)
