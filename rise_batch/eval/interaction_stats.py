"""A run's interaction-space figures: the per-query values of eval/interaction.py as rates and medians with 95%
intervals (report.json's `interaction` per run, and the report's section: report_rows.py). Pure: no I/O.

Booleans (`gold_read`) are rates with a Wilson interval over the queries that have gold documents (and steps
recorded per call). A step (`gold_in_workspace_step`, `gold_surfaced_step`) is a median over the queries where it
happened, with a bootstrap interval, beside the share of queries where it happened (Wilson): "never" is not a
large step. Counts are medians with a bootstrap interval, and means.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rise_batch.eval.metrics import bootstrap_ci, mean, median, wilson_ci

RATES = ("gold_read",)
STEPS = ("gold_in_workspace_step", "gold_surfaced_step")
COUNTS = ("gold_lines_read", "lines_read", "toc_lines_read", "search_calls", "workspace_docs_final")


def _median(values: Sequence[float]) -> dict[str, Any]:
    return {
        "median": median(values),
        "ci95": bootstrap_ci(values, statistic="median"),
        "mean": mean(values),
        "n": len(values),
    }


def interaction_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per-run figures from per-query rows (metrics.per_query_rows), under the per-query names."""
    gold = [r for r in rows if r.get("gold_read") is not None]  # has gold docs, and per-step records
    out: dict[str, Any] = {"n_queries": len(rows), "n_with_gold": len(gold)}
    for key in RATES:
        k = sum(1 for r in gold if r[key])
        out[key] = {"rate": k / len(gold) if gold else None, "ci95": wilson_ci(k, len(gold)), "k": k, "n": len(gold)}
    for key in STEPS:
        values = [float(r[key]) for r in gold if r.get(key) is not None]
        reached = wilson_ci(len(values), len(gold))
        rate = len(values) / len(gold) if gold else None
        out[key] = _median(values) | {"reached": len(values), "of": len(gold), "reached_rate": rate}
        out[key]["reached_ci95"] = reached
    for key in COUNTS:
        out[key] = _median(
            [float(r[key]) for r in (gold if key.startswith("gold") else rows) if r.get(key) is not None]
        )
    return out


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def _ci(ci: Sequence[float] | None, scale: float = 1.0, digits: int = 0) -> str:
    return "" if not ci else f" [{scale * ci[0]:.{digits}f}, {scale * ci[1]:.{digits}f}]"


def _med(m: dict[str, Any]) -> str:
    return "–" if m.get("median") is None else f"{m['median']:g}{_ci(m.get('ci95'), digits=1)}"


def interaction_rows(labels: Sequence[str], summaries: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The report's interaction-space table (head, rows): a row per run that has the figures."""
    head = [
        "Run",
        "gold_read % [95% CI]",
        "gold in workspace: queries · median step",
        "gold surfaced: queries · median step",
        "gold_lines_read",
        "lines_read",
        "toc_lines_read",
        "search_calls",
        "workspace_docs_final",
    ]
    rows = []
    for label, s in zip(labels, summaries, strict=True):
        m = s.get("interaction") or {}
        if not m:
            continue
        read = m["gold_read"]
        rows.append(
            [
                label,
                f"{_pct(read['rate'])}{_ci(read['ci95'], 100, 1)} ({read['k']}/{read['n']})",
                *[f"{m[k]['reached']}/{m[k]['of']} · {_med(m[k])}" for k in STEPS],
                *[_med(m[k]) for k in COUNTS],
            ]
        )
    return head, rows


INTERACTION_NOTE = (
    "Steps are tool calls numbered from 0 in the trajectory file. gold_read: share of queries with gold "
    "documents where the agent read lines of one (Wilson 95% interval). Gold in workspace / surfaced: queries "
    "where it happened of those with gold, and the median step where it did. Other columns: median per query "
    "[bootstrap 95% interval]. Lines are counted from what the trajectory stored (README: interaction metrics)."
)
