"""`sweep --plan`: each cell's pilot (a seeded random sample of its queries, run and judged in the cell's own run
directory, so the sweep later resumes past it), then what the rest would cost, per cell and in total.

A cell's plan is `run --plan`'s (agent/pilot.py `run_plan`: the same pilot sample, the same estimator,
agent/plan_estimate.py `predict_total`, the same hours bounded by concurrency, rpm and tpm), with the judge's cost
added per query: a pilot query's cost is its trajectory's plus its judgment's, and the interval is for the total of
those sums over the queries left. The judge's cost per trajectory is what the pilot's judgments record when every
pilot trajectory was judged; otherwise it is priced from the grader's prompt filled with the question and the
trajectory's final text (counted by the judge model's token counter) and a reply of GRADER_REPLY_TOKENS. Each cell
says which (`judge_basis`).

The sweep's total resamples queries, not cells: cells over the same queries drew the same seeded pilot, so their
errors move together (a pilot that missed the long queries missed them in every cell). Each query's cost summed
over those cells is one value, and the total's interval is the estimator's for those sums (agent/plan_estimate.py
`paired_total`); cells over other queries are independent groups whose draws add. Hours add (the cells share one
queue of workers), each end from the cells' same ends.
"""

from __future__ import annotations

import hashlib
from typing import Any

from rise_batch.agent.pilot import duration, require_plan_price, run_plan, usd
from rise_batch.agent.plan_estimate import MIN_PILOT, SMALL_PILOT, is_small, paired_total, predict_total
from rise_batch.agent.runner import finished
from rise_batch.eval.judge import build_grader_messages, response_text
from rise_batch.eval.judge_runner import gold_answers
from rise_batch.eval.rundir import load_run
from rise_batch.eval.sweep import JudgeSpec
from rise_batch.prompts import load_prompt

GRADER_REPLY_TOKENS = 300  # an unmeasured grader reply: its four short fields (a judged pilot measures the real one)
JUDGED, COUNTED, NO_JUDGE = "pilot judgments", "prompt + final text (token counter)", "no judge"


def judge_costs(run: Any, stems: list[str], judge: Any, prompt: str | None) -> tuple[list[float], str]:
    """What grading each pilot trajectory (`stems` of `run`) costs, and how that was found."""
    if judge is None:
        return [0.0] * len(stems), NO_JUDGE
    if stems and all(s in run.judgments for s in stems):
        return [float(run.judgments[s].get("cost_usd") or 0.0) for s in stems], JUDGED
    from rise_batch.llm.tokens import counter_for  # lazy: loads the tokenizer

    prices, counter = require_plan_price(judge.model, judge.prices_file), counter_for(judge.model)
    template = load_prompt(prompt or JudgeSpec().prompt)
    costs = []
    for s in stems:
        t = run.trajectories[s]
        messages = build_grader_messages(template, t.get("query") or "", response_text(t), gold_answers(t, {}))
        costs.append(prices.cost(judge.model, counter.messages(messages), 0, GRADER_REPLY_TOKENS))
    return costs, COUNTED


def cell_plan(cid: str, cfg: Any, plan: Any, judge: Any = None, prompt: str | None = None) -> dict[str, Any]:
    """A cell's plan from its run directory: `run --plan`'s figures for the agent, and the cost interval for agent
    plus judge (`judge`: the grader's LLMConfig, None when the sweep does not judge)."""
    agent = run_plan(cfg, plan, {})
    done = {q.query_id for q in plan.queries if finished(cfg.out, q.query_id, plan.config_hash)}
    run = load_run(cfg.out)
    stems = sorted(s for s, t in run.trajectories.items() if t.get("query_id") in done)
    graded, basis = judge_costs(run, stems, judge, prompt)
    per_query = [float(run.trajectories[s].get("cost_usd") or 0.0) + g for s, g in zip(stems, graded, strict=True)]
    m = agent["remaining_queries"]
    cost = predict_total(per_query, m)
    ids = sorted(q.query_id for q in plan.queries)
    return {
        "cell": cid,
        "pilot_queries": len(stems),
        "remaining_queries": m,
        "query_set": hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16],  # cells alike here share queries
        "pilot_usd_by_query": {
            run.trajectories[s]["query_id"]: round(c, 9) for s, c in zip(stems, per_query, strict=True)
        },
        "spent_usd": round(sum(per_query), 6),
        "cost_usd": cost.as_dict(6),
        "agent_cost_usd": agent["cost_usd"],
        "judge_cost_usd": predict_total(graded, m).as_dict(6),
        "judge_basis": basis,
        "hours": agent["hours"],
        "hours_bound_by": agent["hours_bound_by"],
        "small_pilot": m > 0 and is_small(len(stems), cost),
    }


def query_groups(cells: list[dict[str, Any]]) -> list[tuple[list[float], int]]:
    """Per group of cells over the same queries: each pilot query's cost summed over the group's cells (the pilot
    queries all of them finished), and the queries left. A cell with fewer left than its group's most counts its
    cost in proportion (m_cell / m_group), so the sums still add up to the cells' totals. Cells whose pilots share
    fewer than MIN_PILOT queries (run apart before the plan) are each a group of their own."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for c in cells:
        groups.setdefault(c["query_set"], []).append(c)
    out = []
    for group in groups.values():
        m = max(c["remaining_queries"] for c in group)
        if not m:
            continue
        common = set.intersection(*(set(c["pilot_usd_by_query"]) for c in group))
        if len(common) < MIN_PILOT <= min(len(c["pilot_usd_by_query"]) for c in group):
            # pilots that hardly overlap (cells run apart before): each cell alone, as if independent
            out += [(list(c["pilot_usd_by_query"].values()), c["remaining_queries"]) for c in group]
            continue
        sums = [sum(c["pilot_usd_by_query"][q] * c["remaining_queries"] / m for c in group) for q in sorted(common)]
        out.append((sums, m))
    return out


def plan_total(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """The sweep's total: the cost's interval resamples queries, paired across the cells that share them
    (module docstring); hours add, each end from the cells' same ends (one queue of workers)."""
    cost = paired_total(query_groups(cells)) if any(c["remaining_queries"] for c in cells) else None
    ends = [[c["hours"][k] for c in cells] for k in ("estimate", "low", "high")]
    hours = {k: None if None in v else sum(v) for k, v in zip(("estimate", "low", "high"), ends, strict=True)}
    return {"cost_usd": cost.as_dict(6) if cost else {"estimate": 0.0, "low": 0.0, "high": 0.0}, "hours": hours}


def plan_table(cells: list[dict[str, Any]], tot: dict[str, Any]) -> str:
    """One row per cell and the total, each an estimate with its 95% prediction interval; then what the judge's
    figures stand on and whether a pilot is too small to trust."""

    def figures(c: dict[str, Any]) -> str:
        u, h = c["cost_usd"], c["hours"]
        est, low, high = usd(u["estimate"], u["low"], u["high"])
        cost = f"{est:>12} [{low}, {high}]" if u["low"] is not None else f"{est:>12} [no interval]"
        time = f"[{duration(h['low'])}, {duration(h['high'])}]" if h["low"] is not None else "[no interval]"
        return f"{cost:<36} {duration(h['estimate']):>9} {time}"

    w = max([len("total"), *(len(c["cell"]) for c in cells)])
    rows = [f"{'cell':<{w}} {'pilot':>5} {'left':>6} {'USD agent+judge [95% interval]':<36} {'time':>9} [95% interval]"]
    rows += [f"{c['cell']:<{w}} {c['pilot_queries']:>5} {c['remaining_queries']:>6} {figures(c)}" for c in cells]
    rows.append(f"{'total':<{w}} {'':>5} {'':>6} {figures(tot)}")
    why = sorted(
        {str(u["no_interval"]) for u in [*(c["cost_usd"] for c in cells), tot["cost_usd"]] if u.get("no_interval")}
    )
    rows += [f"no interval: {w}" for w in why]
    bases = sorted({c["judge_basis"] for c in cells})
    rows.append(f"judge cost per trajectory from: {', '.join(bases)}")
    small = [c["cell"] for c in cells if c.get("small_pilot")]
    if small:
        rows.append(
            f"rough figures for {len(small)} cell(s) (first: {small[0]}): a small pilot of skewed costs may miss the "
            f"long trajectories, and the total then lands above its interval more often than 1 in 20; --pilot "
            f"{SMALL_PILOT} or more narrows it"
        )
    rows.append("run the same command without --plan to run the rest (the pilots' trajectories are kept)")
    return "\n".join(rows)
