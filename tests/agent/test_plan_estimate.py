"""The plan's estimator (agent/plan_estimate.py) and the sweep's paired total (eval/sweep_plan.py), as pure
functions: intervals that hold their shape on the pilots that broke them (a lower bound of $0, a zero-width "95%"
interval from one query, a total that treated cells sharing queries as independent)."""

from __future__ import annotations

import random

import pytest

from rise_batch.agent.pilot import duration, usd
from rise_batch.agent.plan_estimate import MIN_PILOT, NO_SPREAD, paired_total, predict_total
from rise_batch.eval.sweep_plan import plan_total, query_groups


def skewed(n: int, seed: int = 1) -> list[float]:
    """Trajectory costs as they come: most small, a few long ones costing many times more."""
    rng = random.Random(seed)
    return [0.002 * (1 + int(rng.lognormvariate(1.3, 0.8))) ** 1.6 for _ in range(n)]


def test_a_lower_bound_is_above_zero_when_every_pilot_query_cost_something() -> None:
    for seed in range(20):  # the pilots whose symmetric interval reached below zero (skewed, small)
        x = skewed(5, seed)
        c = predict_total(x, 15, seed=seed)
        assert c.low is not None and 0 < c.low < c.estimate < c.high, (x, c)


def test_an_interval_has_positive_width_and_a_longer_upper_arm_for_skewed_costs() -> None:
    c = predict_total(skewed(50), 250)
    assert c.low < c.estimate < c.high
    assert c.high - c.estimate > c.estimate - c.low


def test_below_five_pilot_queries_there_is_the_estimate_and_why_no_interval() -> None:
    for n in range(1, MIN_PILOT):
        c = predict_total(skewed(n), 20)
        assert c.estimate == pytest.approx(20 * sum(skewed(n)) / n)
        assert c.low is None and c.high is None and f"{n} queries is too few" in c.why
        assert c.as_dict()["no_interval"] == c.why
    assert predict_total(skewed(MIN_PILOT), 20).low is not None


def test_a_pilot_without_spread_says_so_and_one_with_a_little_has_an_interval_around_it() -> None:
    same = predict_total([0.25] * 20, 60)
    assert (same.estimate, same.low, same.high, same.why) == (15.0, None, None, NO_SPREAD)
    alike = [0.0063 + 0.00001 * (i % 3) for i in range(20)]  # a deterministic agent: costs differ by a token or two
    c = predict_total(alike, 60)
    assert c.low < c.estimate < c.high
    assert c.low < 60 * min(alike) * 1.001 and c.high > 60 * max(alike) * 0.999


def test_the_sweep_total_resamples_queries_so_cells_sharing_them_move_together() -> None:
    x = skewed(20)
    same = paired_total([([2 * v for v in x], 80)])  # two cells that cost alike on every query
    independent = predict_total(x, 80, seed=1), predict_total(x, 80, seed=2)
    # two identical cells: the total's interval is twice one cell's, not narrower as independent cells would give
    one = predict_total(x, 80)
    assert same.low == pytest.approx(2 * one.low, rel=1e-9) and same.high == pytest.approx(2 * one.high, rel=1e-9)
    quadrature = sum(c.estimate for c in independent) + sum((c.high - c.estimate) ** 2 for c in independent) ** 0.5
    assert same.high > quadrature


def test_cells_over_the_same_queries_form_one_group_and_other_queries_another() -> None:
    x, y = skewed(10, 1), skewed(10, 2)
    cell = lambda name, qs, costs, m: {  # noqa: E731
        "cell": name,
        "query_set": qs,
        "remaining_queries": m,
        "pilot_usd_by_query": {f"q{i}": c for i, c in enumerate(costs)},
        "hours": {"estimate": 1.0, "low": 0.5, "high": 2.0},
    }
    cells = [cell("a", "A", x, 30), cell("b", "A", y, 30), cell("c", "B", y, 30)]
    groups = query_groups(cells)
    assert sorted(len(v) for v, _ in groups) == [10, 10]
    assert any(v == pytest.approx([a + b for a, b in zip(x, y, strict=True)]) for v, _ in groups)
    tot = plan_total(cells)
    assert tot["cost_usd"]["estimate"] == pytest.approx(30 * (sum(x) + 2 * sum(y)) / 10)
    assert 0 < tot["cost_usd"]["low"] < tot["cost_usd"]["estimate"] < tot["cost_usd"]["high"]
    assert tot["hours"] == {"estimate": 3.0, "low": 1.5, "high": 6.0}


def test_a_total_over_a_cell_of_too_small_a_pilot_has_no_interval() -> None:
    assert paired_total([(skewed(20), 10), (skewed(3), 10)]).why.startswith("a pilot of 3 queries")


def test_dollars_print_to_as_many_places_as_tell_the_bounds_and_the_spend_apart() -> None:
    assert usd(0.1266, 0.12634, 0.12681, 0.12683) == ["$0.12660", "$0.12634", "$0.12681", "$0.12683"]
    assert usd(1.9, None, 17.96) == ["$1.9000", "-", "$17.9600"]


def test_durations_print_in_hours_minutes_or_seconds() -> None:
    assert [duration(h) for h in (2.5, 0.25, 0.0026, None)] == ["2.50 h", "15.0 min", "9.4 s", "-"]


def test_cells_whose_pilots_hardly_overlap_are_each_a_group_of_their_own() -> None:
    x, y = skewed(8, 1), skewed(8, 2)
    cells = [
        {"query_set": "A", "remaining_queries": 20, "pilot_usd_by_query": {f"a{i}": v for i, v in enumerate(x)}},
        {"query_set": "A", "remaining_queries": 20, "pilot_usd_by_query": {f"b{i}": v for i, v in enumerate(y)}},
    ]
    assert query_groups(cells) == [(x, 20), (y, 20)]
