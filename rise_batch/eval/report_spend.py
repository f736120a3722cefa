"""What each run (a sweep's cell) and all of them together spent: agents, judge, total, and $/query with and
without the judge, for report.md, report.html, report.json and sweep.json.

The total of a directory is `rise_batch.money.spent.spent_usd(directory)`, the one figure of "all this directory
has paid" that every reader of the engine prints as `spent_usd` (every resume, cut trajectories and replaced
judgments included); it is never summed again here. The agents / judge split comes from the trajectory and
judgment files the report reads (what each records as paid, its cut or replaced predecessors' included), so the
total may exceed their sum by what files the report leaves out recorded (trajectories of an earlier config).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from rise_batch.agent.ledger import spent_usd as trajectory_spend
from rise_batch.eval.judge_runner import judgment_spend
from rise_batch.eval.rundir import RunData, load_run
from rise_batch.money.spent import spent_usd
from rise_batch.storage import AnyPath, location

log = logging.getLogger(__name__)

SPEND_NOTE = (
    "Spent: what each run directory has paid in all (every resume, trajectories cut and run again, judgments "
    "replaced), agents and judge; the agents' and the judge's share from their trajectory and judgment files. "
    "$/query: per query of the run, without and with the judge."
)
SPEND_KEYS = ("agents_usd", "judge_usd", "spent_usd")


def split(trajectories: Iterable[dict[str, Any]], judgments: Iterable[dict[str, Any]]) -> dict[str, float]:
    """The agents' and the judge's dollars that these trajectory and judgment records say were paid."""
    return {
        "agents_usd": sum(trajectory_spend(t) for t in trajectories),
        "judge_usd": sum(judgment_spend(j) for j in judgments),
    }


def directory_spend(directory: str | AnyPath, run: RunData | None = None) -> dict[str, float]:
    """{agents_usd, judge_usd, spent_usd} of a run directory (`run`: it already loaded); zeros for one not made."""
    path = location(directory)
    if run is None:
        try:
            run = load_run(path)
        except FileNotFoundError:
            return dict.fromkeys(SPEND_KEYS, 0.0)
    shares = split(run.trajectories.values(), run.judgments.values())
    try:
        total = spent_usd(path)
    except (TypeError, ValueError) as e:  # a forged record the total cannot add up: the report still draws
        log.warning("%s: its total spend cannot be read (%s); the agents' and the judge's shown instead", path, e)
        total = shares["agents_usd"] + shares["judge_usd"]
    return {k: round(v, 8) for k, v in (shares | {"spent_usd": total}).items()}


def total_spend(spends: Iterable[dict[str, float]]) -> dict[str, float]:
    """The spends of several directories added up (a sweep's cells, a report's runs)."""
    spends = list(spends)
    return {k: round(sum(float(s.get(k) or 0.0) for s in spends), 6) for k in SPEND_KEYS}


def _usd(x: float) -> str:
    return f"${x:.4f}"


def _row(label: str, n: int, spend: dict[str, Any]) -> list[str]:
    agents, judge, total = (float(spend.get(k) or 0.0) for k in SPEND_KEYS)
    per_query = [_usd(x / n) if n else "–" for x in (agents, total)]
    return [label, str(n), _usd(agents), _usd(judge), _usd(total), *per_query]


def spend_rows(labels: Sequence[str], summaries: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """A row per run (its `spent` from the report) and one for all of them: agents, judge, total, $/query."""
    head = ["Run", "Queries", "Agents $", "Judge $", "Spent $ (total)", "$/query agents", "$/query with judge"]
    rows = [
        _row(label, int(s.get("n_queries") or 0), s.get("spent") or {})
        for label, s in zip(labels, summaries, strict=True)
    ]
    if len(summaries) > 1:
        n = sum(int(s.get("n_queries") or 0) for s in summaries)
        rows.append(_row("All runs", n, total_spend(s.get("spent") or {} for s in summaries)))
    return head, rows
