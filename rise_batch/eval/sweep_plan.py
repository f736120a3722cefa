"""`sweep --plan`: each cell's pilot (a seeded random sample of its queries, run and judged in the cell's own run
directory, so the sweep later resumes past it), then what the rest would cost, per cell and in total.

The pilot's queries are chosen here (`pilot_sample`); the figures come from `estimate`, the one place a better
estimator plugs in (the run-level plan's). This one is a 95% prediction interval for the *total* of the remaining
queries with Student's t quantile for the pilot's size: the spread of one query's cost times the remaining count, plus
the uncertainty of the pilot's mean. Trajectory costs are skewed, so with a small pilot the interval is wide (and its
low end is floored at 0); the table says how many queries it stands on.
"""

from __future__ import annotations

import math
import random
from typing import Any

from rise_batch.eval.rundir import load_run
from rise_batch.queries import Query

# Student's t 0.975 quantiles by degrees of freedom (the pilot's size - 1): with a handful of pilot queries the
# spread itself is uncertain, and the normal 1.96 would promise more than it holds (8 of 12 cells covered with 3-query
# pilots in the demo Table 1 grid). Beyond 30, 1.96.
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        12: 2.179, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042}  # fmt: skip


def t975(df: int) -> float:
    """The 0.975 quantile for `df` degrees of freedom (the table's nearest entry at or below it; 1.96 past 30)."""
    if df > 30:
        return 1.96
    return T975[max(d for d in T975 if d <= max(df, 1))]


def pilot_sample(cid: str, queries: list[Query], pending: list[Query], n: int) -> list[Query]:
    """The pending queries of a cell's pilot: finished ones count toward `n`; the rest a random sample seeded by the
    cell's id (the same on every `--plan`, so a second plan adds nothing)."""
    need = max(0, n - (len(queries) - len(pending)))
    rng = random.Random(f"pilot\0{cid}")
    order = sorted(pending, key=lambda q: q.query_id)
    return sorted(rng.sample(order, min(need, len(order))), key=lambda q: q.query_id)


def estimate(costs: list[float], remaining: int) -> dict[str, float]:
    """{estimate, low, high} of the total of `remaining` more draws like `costs` (a 95% prediction interval)."""
    n = len(costs)
    if remaining == 0:
        return {"estimate": 0.0, "low": 0.0, "high": 0.0}
    if n == 0:  # nothing to stand on: no figure rather than a made-up one
        return {"estimate": math.nan, "low": math.nan, "high": math.nan}
    mean = sum(costs) / n
    var = sum((c - mean) ** 2 for c in costs) / (n - 1) if n > 1 else mean**2  # one draw: spread as large as it
    half = t975(n - 1) * math.sqrt(remaining * var + remaining**2 * var / n)
    total = mean * remaining
    return {"estimate": total, "low": max(0.0, total - half), "high": total + half}


def cell_plan(cid: str, run_dir: Any, n_queries: int, wall_clock_s: float, concurrency: int) -> dict[str, Any]:
    """A cell's plan from what its run directory holds: per query, the agent's and the judge's cost and the
    trajectory's seconds; `hours` is the serial total over the trajectories in flight (`concurrency`), which holds
    while the rate limits are not what binds (the run-level plan's estimator refines it)."""
    run = load_run(run_dir)
    per_query = []
    seconds = []
    for stem, t in run.trajectories.items():
        if t.get("retryable"):
            continue
        judged = run.judgments.get(stem) or {}
        per_query.append((t.get("cost_usd") or 0.0) + (judged.get("cost_usd") or 0.0))
        seconds.append(min(t.get("elapsed_s") or 0.0, wall_clock_s))
    remaining = max(0, n_queries - len(per_query))
    serial = {k: v / 3600 for k, v in estimate(seconds, remaining).items()}
    return {
        "cell": cid,
        "pilot_queries": len(per_query),
        "remaining_queries": remaining,
        "spent_usd": sum(per_query),
        "cost_usd": estimate(per_query, remaining),
        "hours": {k: v / max(concurrency, 1) for k, v in serial.items()},
        "trajectory_hours": serial,  # one after the other
    }


def plan_total(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """The sweep's total: estimates add; the interval's half-widths add in quadrature (cells are independent). Hours
    add too: the cells share one pool of workers (one queue)."""

    def add(key: str) -> dict[str, float]:
        est = sum(c[key]["estimate"] for c in cells)
        up = math.sqrt(sum((c[key]["high"] - c[key]["estimate"]) ** 2 for c in cells))
        down = math.sqrt(sum((c[key]["estimate"] - c[key]["low"]) ** 2 for c in cells))
        return {"estimate": est, "low": max(0.0, est - down), "high": est + up}

    return {"cost_usd": add("cost_usd"), "hours": add("hours")}


def plan_table(cells: list[dict[str, Any]], tot: dict[str, Any]) -> str:
    def figures(c: dict[str, Any]) -> str:
        u, h = c["cost_usd"], c["hours"]
        return (
            f"{u['estimate']:>12.4f} [{u['low']:.4f}, {u['high']:.4f}]  "
            f"{h['estimate']:>8.3g} [{h['low']:.3g}, {h['high']:.3g}]"
        )

    w = max([len("total"), *(len(c["cell"]) for c in cells)])
    rows = [f"{'cell':<{w}} {'pilot':>5} {'left':>6} {'USD estimate [95% interval]':>34}  hours [95% interval]"]
    rows += [f"{c['cell']:<{w}} {c['pilot_queries']:>5} {c['remaining_queries']:>6} {figures(c)}" for c in cells]
    rows.append(f"{'total':<{w}} {'':>5} {'':>6} {figures(tot)}")
    return "\n".join(rows)
