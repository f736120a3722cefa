"""Which runs a report compares, and what it calls them: pairs along one factor of the grid at a time. Pure: no I/O.

A sweep is a grid (system x model x K x retriever x corpus, repeated): the question a reader brings to it is "is
system X better than Y, and at what cost" at a fixed model, K and corpus, or "what does a larger K buy" for a fixed
system. So a report pairs each two runs that differ in exactly one of those factors (every pair of systems at each
(model, K, retriever, corpus), every pair of K values for each (system, model, retriever, corpus), and so on), and
never a pair that differs in two: such a difference mixes two effects and answers neither question. Repeats are
paired only with the same repeat. Runs that share every coordinate (two run directories given to `report` that
differ in a setting outside the grid, such as max_calls) are paired too: the reader asked for both.

Every table names a run by what it is, `full_label`: system / model / K / retriever / corpus (/ #repeat), with its
number in the report's list of run directories, never by the number alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from rise_batch.eval.paired import diff_text
from rise_batch.eval.plots import system_name

# the grid's factors, in the order the report lists their comparisons: (summary key, what a reader calls it)
FACTORS: tuple[tuple[str, str], ...] = (
    ("system", "System"),
    ("model", "Model"),
    ("k", "K"),
    ("retriever", "Retriever"),
    ("corpus", "Corpus"),
)
SAME_SETTINGS = "settings"  # the factor of a pair that shares every coordinate (it differs outside the grid)


class Pair(NamedTuple):
    """Runs `a` and `b` (positions in the report's list, a < b) and the one factor they differ in."""

    a: int
    b: int
    factor: str


def _coords(s: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(s.get(key) for key, _ in FACTORS)


def factor_pairs(summaries: Sequence[dict[str, Any]]) -> list[Pair]:
    """Every pair of runs that differ in exactly one factor (or in none), grouped by factor in FACTORS' order, each
    group in the runs' order; never a pair differing in two factors or in their repeat."""
    found: list[Pair] = []
    for i, a in enumerate(summaries):
        for j in range(i + 1, len(summaries)):
            b = summaries[j]
            if a.get("repeat") != b.get("repeat"):
                continue
            differ = [key for (key, _), x, y in zip(FACTORS, _coords(a), _coords(b), strict=True) if x != y]
            if len(differ) <= 1:
                found.append(Pair(i, j, differ[0] if differ else SAME_SETTINGS))
    order = [key for key, _ in FACTORS] + [SAME_SETTINGS]
    return sorted(found, key=lambda p: (order.index(p.factor), p.a, p.b))


def factor_value(s: dict[str, Any], key: str) -> str:
    """One coordinate of a run as a reader names it: the system's label, `K=5`, the model as recorded."""
    value = s.get(key)
    if key == "system":
        return system_name(value)
    if key == "k":
        return "K=–" if value is None else f"K={value}"
    return "–" if value is None else str(value)


def _shown(s: dict[str, Any], key: str) -> bool:
    """Coordinates a label names: every factor a run records (the default bm25 retriever and repeat 0 left out)."""
    value = s.get(key)
    if key == "retriever":
        return value not in (None, "bm25")
    if key == "k":
        return value is not None
    return value is not None or key in ("system", "model")


def full_label(s: dict[str, Any], skip: str | None = None) -> str:
    """`RISE / gpt-5.4-mini / K=5 / sample`: what the run is, every factor it records (but `skip`), its repeat."""
    parts = [factor_value(s, key) for key, _ in FACTORS if key != skip and _shown(s, key)]
    return " / ".join(parts) + (f" #{s['repeat']}" if s.get("repeat") else "")


def numbered_labels(summaries: Sequence[dict[str, Any]]) -> list[str]:
    """'1. RISE / gpt-5.4-mini / K=5 / sample': the run's number in the list of run directories, and what it is."""
    return [f"{i}. {full_label(s)}" for i, s in enumerate(summaries, 1)]


def factor_name(factor: str) -> str:
    return dict(FACTORS).get(factor, "Other settings")


def pair_title(summaries: Sequence[dict[str, Any]], pair: Pair) -> str:
    """`System: RISE vs RISE-BM25 at gpt-5.4-mini / K=5 / sample` (runs `2 vs 4` when they share every factor)."""
    a, b = summaries[pair.a], summaries[pair.b]
    if pair.factor == SAME_SETTINGS:
        return f"Other settings: run {pair.a + 1} vs run {pair.b + 1} at {full_label(a)}"
    at = full_label(a, skip=pair.factor)
    vs = f"{factor_value(a, pair.factor)} vs {factor_value(b, pair.factor)}"
    return f"{factor_name(pair.factor)}: {vs}" + (f" at {at}" if at else "")


COMPARISONS_NOTE = (
    "Each pair of runs that differ in exactly one factor of the grid (system, model, K, retriever, corpus) over "
    "the queries both answered: B − A with its paired bootstrap 95% interval; pairs that differ in two factors are "
    "not compared (their difference mixes two effects). A and B are numbered as in the list of run directories; "
    "each comparison's full table follows."
)

NO_COMPARISON = (
    "No two of these runs differ in exactly one factor (system, model, K, retriever, corpus) over common queries, "
    "so none is compared: a difference in two factors at once mixes their effects."
)


def comparison_rows(summaries: Sequence[dict[str, Any]], paired: Sequence[dict[str, Any]]) -> tuple[list[str], list]:
    """The list of comparisons, a row each: the factor, what A and B are, where, the queries, and the differences
    in accuracy and in agent $/query that decide "which is better, at what cost"."""
    head = ["Factor", "A", "B", "At", "Queries", "Accuracy % B − A [95% CI]", "Agent $/query B − A [95% CI]"]
    rows = []
    for p in paired:
        a, b, factor = p["a_run"] - 1, p["b_run"] - 1, p["factor"]
        if factor == SAME_SETTINGS:
            names, at = (f"{a + 1}. run {a + 1}", f"{b + 1}. run {b + 1}"), full_label(summaries[a])
        else:
            names = (f"{a + 1}. {factor_value(summaries[a], factor)}", f"{b + 1}. {factor_value(summaries[b], factor)}")
            at = full_label(summaries[a], skip=factor) or "–"
        cells = [factor_name(factor), *names, at, str(p["n_common"])]
        rows.append([*cells, diff_text(p, "accuracy"), diff_text(p, "cost_per_query")])
    return head, rows
