"""`sweep --plan`: each cell's pilot (a seeded random sample of its queries, run and judged in the cell's own run
directory, so the sweep later resumes past it), then what the rest would cost, per cell and in total.

A cell's plan is `run --plan`'s (agent/pilot.py `run_plan`: the same pilot sample, the same estimator,
agent/plan_estimate.py `predict_total`, the same hours bounded by concurrency, rpm and tpm), with the judge's cost
added per query: a pilot query's cost is its trajectory's plus its judgment's, and the interval is for the total of
those sums over the queries left. The judge's cost per trajectory is what the pilot's judgments record when every
pilot trajectory was judged; otherwise it is priced from the grader's prompt filled with the question and the
trajectory's final text (counted by the judge model's token counter) and a reply of GRADER_REPLY_TOKENS. Each cell
says which (`judge_basis`). The sweep's total adds the cells' estimates; the interval's arms add in quadrature
(cells are independent draws), and hours add (the cells share one queue of workers).
"""

from __future__ import annotations

import math
from typing import Any

from rise_batch.agent.pilot import require_plan_price, run_plan
from rise_batch.agent.plan_estimate import SMALL_PILOT, is_small, predict_total
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
    return {
        "cell": cid,
        "pilot_queries": len(stems),
        "remaining_queries": m,
        "spent_usd": round(sum(per_query), 6),
        "cost_usd": cost.as_dict(6),
        "agent_cost_usd": agent["cost_usd"],
        "judge_cost_usd": predict_total(graded, m).as_dict(6),
        "judge_basis": basis,
        "hours": agent["hours"],
        "hours_bound_by": agent["hours_bound_by"],
        "small_pilot": m > 0 and is_small(len(stems), cost),
    }


def plan_total(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """The sweep's total: estimates add; the interval's arms add in quadrature (cells are independent). Hours add
    too: the cells share one pool of workers (one queue)."""

    def add(key: str) -> dict[str, float]:
        est = sum(c[key]["estimate"] for c in cells)
        up = math.sqrt(sum((c[key]["high"] - c[key]["estimate"]) ** 2 for c in cells))
        down = math.sqrt(sum((c[key]["estimate"] - c[key]["low"]) ** 2 for c in cells))
        return {"estimate": est, "low": max(0.0, est - down), "high": est + up}

    return {"cost_usd": add("cost_usd"), "hours": add("hours")}


def plan_table(cells: list[dict[str, Any]], tot: dict[str, Any]) -> str:
    """One row per cell and the total, each an estimate with its 95% prediction interval; then what the judge's
    figures stand on and whether a pilot is too small to trust."""

    def figures(c: dict[str, Any]) -> str:
        u, h = c["cost_usd"], c["hours"]
        return (
            f"{u['estimate']:>12.4f} [{u['low']:.4f}, {u['high']:.4f}]  "
            f"{h['estimate']:>8.3g} [{h['low']:.3g}, {h['high']:.3g}]"
        )

    w = max([len("total"), *(len(c["cell"]) for c in cells)])
    rows = [f"{'cell':<{w}} {'pilot':>5} {'left':>6} {'USD agent+judge [95% interval]':>34}  hours [95% interval]"]
    rows += [f"{c['cell']:<{w}} {c['pilot_queries']:>5} {c['remaining_queries']:>6} {figures(c)}" for c in cells]
    rows.append(f"{'total':<{w}} {'':>5} {'':>6} {figures(tot)}")
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
