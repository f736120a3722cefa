"""The cost limit's arithmetic (rise_batch.llm.spend): a request waits while reservations in flight hold what it
needs, and trips the limit only when it would not fit even once they have settled."""

from __future__ import annotations

import asyncio

import pytest

from rise_batch.llm.pricing import PriceTable
from rise_batch.llm.spend import BudgetExceeded, CostBudget, worst_case_usd


def test_a_request_waits_for_reservations_in_flight_then_trips_only_past_the_limit() -> None:
    async def go() -> list[str]:
        b = CostBudget(1.0, spent_usd=0.2)
        await b.admit(0.5)  # held: 0.2 spent + 0.5
        seen: list[str] = []

        async def second() -> None:
            await b.admit(0.5)  # 0.2 + 0.5 + 0.5 > 1: waits for the first to settle
            seen.append("admitted")

        task = asyncio.ensure_future(second())
        await asyncio.sleep(0.2)
        seen.append("waiting" if not task.done() else "early")
        b.settle(0.5, 0.05)  # the first reply cost far less than its worst case
        await task
        assert b.spent == pytest.approx(0.25) and b.reserved == pytest.approx(0.5)
        with pytest.raises(BudgetExceeded):
            await b.admit(0.8)  # 0.25 + 0.8 > 1 even with nothing in flight: the limit trips
        with pytest.raises(BudgetExceeded):
            await b.admit(0.01)  # and stays tripped
        return seen

    assert asyncio.run(go()) == ["waiting", "admitted"]


def test_the_worst_case_is_the_whole_input_uncached_with_a_margin_and_every_output_token() -> None:
    prices = PriceTable.load()
    worst = worst_case_usd(prices, "gpt-5.4-mini", 10_000, 2_000)
    assert worst > prices.cost("gpt-5.4-mini", 10_000, 0, 2_000) > prices.cost("gpt-5.4-mini", 10_000, 9_000, 2_000)
