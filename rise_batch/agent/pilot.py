"""`rise-batch run --plan`: run a seeded pilot inside the run directory, then price the queries left.

The pilot is real: its trajectories are written where the run keeps them, so the run that follows (the same
command without --plan) resumes past them and nothing is paid twice; trajectories already finished count toward
the pilot's size and are never run again. The plan is made from every finished trajectory of the run directory:
per query its model calls, tokens (input, cached input, output) and seconds; each total for the queries left is an
estimate with a 95% prediction interval (agent/plan_estimate.py; none below 5 pilot queries or without spread,
and the plan says why). Dollars are the tokens priced by the price table
(cached input at the provider's cached price), so an unpriced model is refused as --max-cost refuses it. Hours
are the slowest of three bounds at the run's settings: trajectory seconds over `concurrency` trajectories in
flight, model calls over `rpm`, tokens over `tpm`.
"""

from __future__ import annotations

import math
from typing import Any

from rise_batch.agent.plan_estimate import LEVEL, NO_SPREAD, SMALL_PILOT, Interval, is_small, predict_total
from rise_batch.agent.plan_estimate import pilot_sample as sample_ids
from rise_batch.agent.run_config import RunConfig
from rise_batch.agent.runner import finished, trajectory_path
from rise_batch.io import read_json
from rise_batch.llm.pricing import PriceTable
from rise_batch.queries import Query

TOKENS = ("input", "cached_input", "output")


def require_plan_price(model: str, prices_file: str | None) -> PriceTable:
    """The price table, refusing a model it has no price for (a plan in dollars of $0 replies would be a lie)."""
    table = PriceTable.load([prices_file] if prices_file else [])
    table.require(model, "--plan")
    return table


def pilot_sample(plan: Any, n: int, seed: int = 0) -> list[Query]:
    """The queries the pilot runs now: `n` less those already finished, a seeded sample of the rest."""
    need = max(0, n - (len(plan.queries) - len(plan.pending)))
    chosen = set(sample_ids([q.query_id for q in plan.pending], need, seed))
    return [q for q in plan.pending if q.query_id in chosen]


def _hours(seconds: float, calls: float, tokens: float, cfg: RunConfig) -> tuple[float, str]:
    """(hours, what bounds them) for that much work at the run's concurrency, rpm and tpm."""
    bounds = {"concurrency": seconds / max(cfg.concurrency, 1)}
    if cfg.llm.rpm:
        bounds["rpm"] = calls / cfg.llm.rpm * 60
    if cfg.llm.tpm:
        bounds["tpm"] = tokens / cfg.llm.tpm * 60
    by = max(bounds, key=bounds.__getitem__)
    return bounds[by] / 3600, by


def plan_hours(est: dict[str, Interval], cfg: RunConfig) -> tuple[Interval, str]:
    """Hours of the rest: each end from the same end of the seconds, calls and tokens intervals (none without
    them), named by what bounds the estimate."""

    def end(e: Interval, i: int) -> float | None:  # a figure without spread is the same at both ends
        return e.estimate if e.why == NO_SPREAD else e[i]

    ends = []
    for i in range(3):
        figures = [end(est[k], i) for k in ("seconds", "calls", "input", "output")]
        ends.append(None if None in figures else _hours(figures[0], figures[1], figures[2] + figures[3], cfg))
    hours, by = ends[0] or (0.0, "concurrency")
    why = next((w for k in ("seconds", "calls", "input", "output") if (w := est[k].why) not in ("", NO_SPREAD)), "")
    return Interval(hours, *(None if e is None else e[0] for e in ends[1:]), why if ends[1] is None else ""), by


def run_plan(cfg: RunConfig, plan: Any, stats: dict[str, Any], seed: int = 0) -> dict[str, Any]:
    """The plan for the queries of `plan` without a finished trajectory, from those with one."""
    prices = require_plan_price(cfg.llm.model, cfg.llm.prices_file)
    done = [q for q in plan.queries if finished(cfg.out, q.query_id, plan.config_hash)]
    rows = [read_json(trajectory_path(cfg.out, q.query_id)) for q in done]
    m = len(plan.queries) - len(done)
    per: dict[str, list[float]] = {k: [] for k in ("cost", "calls", "seconds", *TOKENS)}
    for t in rows:
        u = t.get("usage") or {}
        tokens = {k: int(u.get(f"{k}_tokens") or 0) for k in TOKENS}
        per["cost"].append(prices.cost(cfg.llm.model, tokens["input"], tokens["cached_input"], tokens["output"]))
        per["calls"].append(float(t.get("model_calls") or 0))
        per["seconds"].append(float(t.get("elapsed_s") or 0.0))
        for k in TOKENS:
            per[k].append(float(tokens[k]))
    if not rows:
        raise ValueError(f"{cfg.out}: no finished pilot trajectory to plan from (see the trajectories' errors)")
    est = {k: predict_total(v, m, seed=seed) for k, v in per.items()}
    hours, bound = plan_hours(est, cfg)
    cost = est["cost"]
    return {
        "pilot_queries": len(rows),
        "remaining_queries": m,
        "pilot_ran": stats.get("ran", 0),
        "pilot_cost_usd": round(sum(per["cost"]), 6),
        "level": LEVEL,
        "model": cfg.llm.model,
        "config_hash": plan.config_hash,
        "cost_usd": cost.as_dict(6),
        "cost_usd_per_query": round(cost.estimate / m, 6) if m else 0.0,
        "hours": hours.as_dict(6),
        "hours_bound_by": bound,
        "model_calls": est["calls"].as_dict(0),
        "tokens": {k: est[k].as_dict(0) for k in TOKENS},
        "settings": {"concurrency": cfg.concurrency, "workers": cfg.workers, "rpm": cfg.llm.rpm, "tpm": cfg.llm.tpm},
        "small_pilot": m > 0 and is_small(len(rows), cost),
    }


def usd(*figures: float | None) -> list[str]:
    """Dollar figures to as many decimals as tell them apart (4 at least): an interval's bounds and what is
    checked against them must not print alike when they differ."""
    known = [f for f in figures if f is not None]
    gaps = [abs(a - b) for a in known for b in known if a != b]
    places = max(4, min(10, -math.floor(math.log10(min(gaps))))) if gaps else 4
    return ["-" if f is None else f"${f:,.{places}f}" for f in figures]


def duration(hours: float | None) -> str:
    """Hours to a precision that can be checked: hours above one, minutes above one, seconds below."""
    if hours is None:
        return "-"
    if hours >= 1:
        return f"{hours:,.2f} h"
    return f"{hours * 60:.1f} min" if hours >= 1 / 60 else f"{hours * 3600:.1f} s"


def figure(d: dict[str, Any], show: Any = "{:,.0f}".format) -> str:
    """An estimate and its interval as a plan prints it (or the estimate and why there is no interval)."""
    if d.get("low") is None:
        return f"{show(d['estimate'])}  (no interval: {d.get('no_interval', 'the queries are all done')})"
    return f"{show(d['estimate'])}  ({show(d['low'])} - {show(d['high'])})"


def plan_text(p: dict[str, Any], out: str) -> str:
    """The plan for people: one line per figure, and what to do next."""
    c, t = p["cost_usd"], p["tokens"]
    if c.get("low") is None:
        cost = figure(c, lambda v: usd(v)[0])
    else:
        est, low, high = usd(c["estimate"], c["low"], c["high"])
        cost = f"{est}  (95% prediction interval for their total: {low} - {high})"
    lines = [
        f"plan for {out}: {p['pilot_queries']} pilot trajectories finished (${p['pilot_cost_usd']:.4f}, "
        f"{p['pilot_ran']} run now); {p['remaining_queries']} queries left, model {p['model']}",
        f"  {'cost':<20} {cost}",
        f"  {'model calls':<20} {figure(p['model_calls'])}",
    ]
    for k in TOKENS:
        lines.append(f"  {k + ' tokens':<20} {figure(t[k])}")
    s = p["settings"]
    lines.append(
        f"  {'hours':<20} {figure(p['hours'], duration)} at concurrency {s['concurrency']}"
        f", {s['workers']} workers, rpm {s['rpm']:,}, tpm {s['tpm']:,} (bound by {p['hours_bound_by']})"
    )
    if p["small_pilot"]:
        lines.append(
            f"  a rough figure: {p['pilot_queries']} pilot queries of skewed costs (a few long trajectories cost "
            "most) may have missed the long ones, and then the total lands above the interval more often than 1 in "
            f"20; --pilot {max(2 * p['pilot_queries'], SMALL_PILOT)} narrows it and makes that rarer"
        )
    lines.append("  run the same command without --plan to run the rest (the pilot's trajectories are kept)")
    return "\n".join(lines)
