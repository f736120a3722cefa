"""The paper's comparison of two runs over the same queries (e.g. RISE vs RISE-BM25, or two K values): per metric
each run's value, the difference (B - A) and its paired bootstrap 95% interval, and the queries only one of them
got right. Pure: no I/O.

Paired, because both runs answered the same questions: resampling queries (not runs) keeps each query's two
outcomes together, so the interval of the difference is narrower than two independent intervals suggest.
Queries are matched by query_id; only those in both runs count (the table says how many), and for accuracy and
cost per correct answer only those judged in both, for gold_read those with gold documents in both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rise_batch.eval.metrics import BOOTSTRAP_SAMPLES, BOOTSTRAP_SEED

UNDEFINED_SHARE = 0.025  # resamples where a ratio is undefined (no correct answer) beyond which it has no interval


def _usd(row: dict[str, Any]) -> float:
    return float(row.get("agent_usd") or 0.0)


# metric -> (rows that count, value per row, statistic): "mean" or "ratio" (sum of value / sum of correct)
METRICS: dict[str, tuple[Callable[[dict], bool], Callable[[dict], float], str]] = {
    "accuracy": (lambda r: r.get("correct") is not None, lambda r: float(bool(r["correct"])), "mean"),
    "cost_per_query": (lambda r: True, _usd, "mean"),
    "cost_per_correct": (lambda r: r.get("correct") is not None, _usd, "ratio"),
    "model_calls": (lambda r: True, lambda r: float(r.get("model_calls") or 0), "mean"),
    "gold_read_rate": (lambda r: r.get("gold_read") is not None, lambda r: float(bool(r["gold_read"])), "mean"),
}


def _stat(kind: str, values: Any, correct: Any, axis: int | None = None) -> Any:
    import numpy as np

    if kind == "mean":
        return values.mean(axis=axis)
    with np.errstate(divide="ignore", invalid="ignore"):
        return values.sum(axis=axis) / np.where(correct.sum(axis=axis) > 0, correct.sum(axis=axis), np.nan)


def paired_bootstrap(
    a: Sequence[float],
    b: Sequence[float],
    correct_a: Sequence[float],
    correct_b: Sequence[float],
    kind: str,
    *,
    samples: int = BOOTSTRAP_SAMPLES,
    seed: int = BOOTSTRAP_SEED,
    drawn: dict[int, Any] | None = None,
) -> tuple[float, float] | None:
    """Percentile interval of stat(B) - stat(A), the same resampled queries on both sides; None without queries,
    or when the statistic is undefined (a ratio with no correct answer) in too many resamples. `drawn` keeps the
    resampled positions by query count, for the next metric of the same size: the same seed draws the same."""
    import numpy as np

    if not len(a):
        return None
    va, vb, ca, cb = (np.asarray(x, dtype=float) for x in (a, b, correct_a, correct_b))
    drawn = {} if drawn is None else drawn
    if (idx := drawn.get(len(va))) is None:
        idx = drawn[len(va)] = np.random.default_rng(seed).integers(0, len(va), size=(samples, len(va)))
    diff = _stat(kind, vb[idx], cb[idx], 1) - _stat(kind, va[idx], ca[idx], 1)
    if np.isnan(diff).mean() > UNDEFINED_SHARE:
        return None
    lo, hi = np.nanpercentile(diff, [2.5, 97.5])
    return float(lo), float(hi)


def paired_comparison(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any] | None:
    """Run B against run A (summaries with `per_query` rows), or None when they share no query."""
    import numpy as np

    rows_a = {r.get("query_id"): r for r in a.get("per_query") or ()}
    rows_b = {r.get("query_id"): r for r in b.get("per_query") or ()}
    common = [q for q in rows_a if q in rows_b]
    if not common:
        return None
    rows: list[dict[str, Any]] = []
    drawn: dict[int, Any] = {}  # the resampled positions by query count, drawn once for the metrics of that size
    for name, (counts, value, kind) in METRICS.items():
        qs = [q for q in common if counts(rows_a[q]) and counts(rows_b[q])]
        va, vb = [value(rows_a[q]) for q in qs], [value(rows_b[q]) for q in qs]
        ca = [float(bool(rows_a[q].get("correct"))) for q in qs]
        cb = [float(bool(rows_b[q].get("correct"))) for q in qs]
        stat_a = float(_stat(kind, np.asarray(va), np.asarray(ca))) if qs else None
        stat_b = float(_stat(kind, np.asarray(vb), np.asarray(cb))) if qs else None
        defined = stat_a is not None and stat_b is not None and not np.isnan(stat_a) and not np.isnan(stat_b)
        rows.append(
            {
                "metric": name,
                "n": len(qs),
                "a": None if stat_a is None or np.isnan(stat_a) else stat_a,
                "b": None if stat_b is None or np.isnan(stat_b) else stat_b,
                "diff": stat_b - stat_a if defined else None,
                "diff_ci95": paired_bootstrap(va, vb, ca, cb, kind, drawn=drawn) if defined else None,
            }
        )
    judged = [q for q in common if rows_a[q].get("correct") is not None and rows_b[q].get("correct") is not None]
    right = [(bool(rows_a[q]["correct"]), bool(rows_b[q]["correct"])) for q in judged]
    return {
        "a": a.get("run_dir"),
        "b": b.get("run_dir"),
        "n_common": len(common),
        "only_in_a": len(rows_a) - len(common),
        "only_in_b": len(rows_b) - len(common),
        "n_both_judged": len(judged),
        "only_a_correct": sum(1 for x, y in right if x and not y),
        "only_b_correct": sum(1 for x, y in right if y and not x),
        "both_correct": sum(1 for x, y in right if x and y),
        "neither_correct": sum(1 for x, y in right if not x and not y),
        "rows": rows,
    }


_SHOW = {
    "accuracy": ("Accuracy %", 100.0, 1),
    "cost_per_query": ("Agent $/query", 1.0, 4),
    "cost_per_correct": ("Agent $/correct answer", 1.0, 4),
    "model_calls": ("Model calls/query", 1.0, 2),
    "gold_read_rate": ("gold_read %", 100.0, 1),
}


def _fmt(x: float | None, scale: float, digits: int, sign: bool = False) -> str:
    return "–" if x is None else f"{scale * x:{'+' if sign else ''}.{digits}f}"


def diff_text(p: dict[str, Any], metric: str) -> str:
    """One metric's B − A of a comparison and its paired interval, as its table shows them ("–" when undefined)."""
    row = next((r for r in p["rows"] if r["metric"] == metric), None)
    if row is None:
        return "–"
    _, scale, digits = _SHOW[metric]
    ci = row["diff_ci95"]
    ci_text = f" [{_fmt(ci[0], scale, digits, True)}, {_fmt(ci[1], scale, digits, True)}]" if ci else ""
    return _fmt(row["diff"], scale, digits, True) + ci_text


def paired_intro(label_a: str, label_b: str, p: dict[str, Any]) -> str:
    """Which run is A and which B, and the queries compared."""
    left_out = p["only_in_a"] + p["only_in_b"]
    return (
        f"A = {label_a}, B = {label_b}: {p['n_common']} queries in both"
        + (f" ({p['only_in_a']} only in A, {p['only_in_b']} only in B, left out)" if left_out else "")
        + "."
    )


def paired_rows(p: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The paired table of one comparison (head, rows): a row per metric."""
    rows = []
    for r in p["rows"]:
        name, scale, digits = _SHOW[r["metric"]]
        cells = [name, str(r["n"]), _fmt(r["a"], scale, digits), _fmt(r["b"], scale, digits)]
        rows.append([*cells, diff_text(p, r["metric"])])
    return ["Metric", "Queries", "A", "B", "B − A [paired 95% CI]"], rows


def paired_outro(p: dict[str, Any]) -> str:
    """The queries only one run got right, and how the intervals were drawn."""
    return (
        f"Of {p['n_both_judged']} queries judged in both: only A right {p['only_a_correct']}, only B right "
        f"{p['only_b_correct']}, both {p['both_correct']}, neither {p['neither_correct']}. Intervals: percentile "
        "bootstrap over queries resampled in pairs (2,000 resamples, seed 0)."
    )
