"""The --max-cost budget: reservations, the trip, re-asks that finish paid documents, checkpoint totals."""

from __future__ import annotations

import asyncio

import pytest

from rise_batch.structuring.budget import BudgetExceeded, CostBudget, checkpoint_cost
from rise_batch.structuring.checkpoint import CheckpointStore
from rise_batch.types import DocResult, Reply


def test_reserve_trips_once_and_stays_tripped() -> None:
    b = CostBudget(1.0, spent_usd=0.5)
    b.reserve(0.3)
    with pytest.raises(BudgetExceeded) as e:
        b.reserve(0.3)  # 0.5 + 0.3 reserved + 0.3 > 1.0
    assert "would pass --max-cost $1.0000" in str(e.value)
    b.settle(0.3, 0.1)
    with pytest.raises(BudgetExceeded):
        b.reserve(0.01)  # tripped: a smaller request does not sneak in
    b.reserve(0.2, force=True)  # a follow-up of a paid document is never refused
    assert b.spent == pytest.approx(0.6) and b.reserved == pytest.approx(0.2)


def test_guard_settles_actual_cost_and_lets_reasks_through() -> None:
    b = CostBudget(0.05)
    calls = []

    async def chat(messages):
        calls.append(len(messages))
        return Reply("{}", cost_usd=0.02)

    guarded = b.guard(chat, lambda m: 0.02)

    async def go():
        await guarded([{}, {}])
        await guarded([{}, {}])
        with pytest.raises(BudgetExceeded):
            await guarded([{}, {}])
        await guarded([{}, {}, {}, {}])  # a re-ask turn

    asyncio.run(go())
    assert calls == [2, 2, 4] and b.spent == pytest.approx(0.06) and b.reserved == 0


def test_checkpoint_cost_sums_every_part(tmp_path) -> None:
    store = CheckpointStore(tmp_path)
    store.ensure()
    store.write_part(0, [DocResult("a", "", "", "toc", "[]", cost_usd=0.25), DocResult("b", "", "", "toc", "[]")])
    store.write_part(3, [DocResult("c", "", "", "toc", "[]", cost_usd=0.5)])
    assert checkpoint_cost(tmp_path) == pytest.approx(0.75)
    assert checkpoint_cost(tmp_path / "none") == 0.0
