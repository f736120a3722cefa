"""The paper's per-run figures, computed from a run directory's trajectories and judgments (pure: no I/O).

Two choices differ from the reference BrowseComp-Plus scripts on purpose:
- Calibration error is computed over *all* bins. The reference (HLE's `calib_err`) sorts answers by confidence,
  cuts them into bins of 100 with the remainder joined to the last bin, and then sums over every bin but the last
  one; below 200 answers that leaves no bin at all and it reports 0. Here every bin counts (binning below).
- Accuracy comes with a Wilson 95% interval, because on 100-query runs a gap of a few points between two systems
  is within noise, and a percentile bootstrap says nothing at small n (1 judged query right gives [100, 100]);
  Wilson's interval is honest for a proportion at any n (1 of 1: [20.7, 100]). Medians and paired differences
  use a bootstrap (fixed seed, so a report is reproducible).
- A run where more than UNJUDGED_FLAG of its queries have no verdict is flagged (`too_many_unjudged`): its
  accuracy speaks for the judged ones only.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from rise_batch.eval.forkmap import fork_map
from rise_batch.eval.interaction import interaction
from rise_batch.eval.judge import is_empty_answer, is_unjudged, judges

CALIBRATION_BIN = 100  # answers per calibration bin, as in the reference script
BOOTSTRAP_SAMPLES = 2000
BOOTSTRAP_SEED = 0
UNJUDGED_FLAG = 0.10  # share of queries without a verdict above which a run's accuracy is flagged
Z95 = 1.959963984540054
# values above which a bootstrap median is drawn directly (_resampled_medians, exact in distribution at any n): at
# 830 values resampling took 60-95 ms an interval, and a Table 1 sweep's report draws 84 of them
DIRECT_MEDIAN_ABOVE = 100


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def median(values: Sequence[float]) -> float | None:
    return float(statistics.median(values)) if values else None


def bootstrap_ci(
    outcomes: Sequence[bool | float],
    *,
    samples: int = BOOTSTRAP_SAMPLES,
    seed: int = BOOTSTRAP_SEED,
    level: float = 0.95,
    statistic: str = "mean",
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean (or `statistic="median"`) of `outcomes`, resampling queries
    with replacement. For a proportion use wilson_ci: a bootstrap of 1 outcome is a point."""
    import numpy as np

    if not outcomes:
        return None
    x = np.asarray(outcomes, dtype=float)
    rng = np.random.default_rng(seed)
    if statistic == "median" and len(x) > DIRECT_MEDIAN_ABOVE:
        stats = _resampled_medians(np.sort(x), samples, rng)
    else:
        resampled = x[rng.integers(0, len(x), size=(samples, len(x)))]
        stats = np.median(resampled, axis=1) if statistic == "median" else resampled.mean(axis=1)
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(stats, [tail, 100 - tail])
    return float(lo), float(hi)


def _resampled_medians(ordered: Any, samples: int, rng: Any) -> Any:
    """The medians of `samples` resamples (with replacement) of the sorted values `ordered`, drawn directly: a
    resample's median is the value at its middle draw(s) of positions, and the k-th smallest of n uniform draws is
    distributed as Beta(k, n + 1 - k) (the next one above it: that, plus the rest of the way times Beta(1, n - k)).
    Same distribution as sorting every resample, in O(samples) instead of O(samples x n): 10,000 values took 3 s."""
    import numpy as np

    n = len(ordered)
    k = (n + 1) // 2  # the lower middle, 1-based
    low = rng.beta(k, n + 1 - k, size=samples)
    picks = [low] if n % 2 else [low, low + (1 - low) * rng.beta(1, n - k, size=samples)]
    at = [np.minimum((u * n).astype(np.int64), n - 1) for u in picks]
    return sum(ordered[i] for i in at) / len(at)


def wilson_ci(successes: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """Wilson score interval of a proportion (95% by default); None for n = 0. Unlike the normal or bootstrap
    interval it neither collapses at 0 or n successes nor leaves [0, 1]. The bounds are clamped to hold the
    proportion itself: in floating point, 0 of 100 gives a lower bound of 3.5e-18 and 2,000 of 2,000 an upper
    bound of 0.9999999999999998, which a figure would draw as a negative error bar (and refuse)."""
    if n <= 0:
        return None
    p, z2 = successes / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return min(max(0.0, centre - half), p), max(min(1.0, centre + half), p)


def calibration_bins(
    confidences: Sequence[float], correct: Sequence[bool], bin_size: int = CALIBRATION_BIN
) -> list[dict[str, float]]:
    """Answers sorted by confidence (0-100; ties keep their input order) and cut into consecutive bins of
    `bin_size`; the remainder joins the last bin, so there are max(1, n // bin_size) bins and fewer than
    `bin_size` answers make one bin. Each bin: n, mean confidence (0-1), accuracy (0-1)."""
    if len(confidences) != len(correct):
        raise ValueError("confidences and correct must have the same length")
    if bin_size < 1:
        raise ValueError(f"bin_size must be >= 1, got {bin_size!r}")
    n = len(confidences)
    if n == 0:
        return []
    order = sorted(range(n), key=lambda i: confidences[i])
    n_bins = max(1, n // bin_size)
    bins = []
    for b in range(n_bins):
        idx = order[b * bin_size : n if b == n_bins - 1 else (b + 1) * bin_size]
        bins.append(
            {
                "n": len(idx),
                "confidence": sum(confidences[i] for i in idx) / len(idx) / 100.0,
                "accuracy": sum(bool(correct[i]) for i in idx) / len(idx),
            }
        )
    return bins


def calibration_error(
    confidences: Sequence[float], correct: Sequence[bool], bin_size: int = CALIBRATION_BIN, norm: str = "l2"
) -> float | None:
    """Root-mean-square (l2, the reference's default) or mean absolute (l1) gap between confidence and accuracy
    over ALL bins, weighted by bin size; in [0, 1]. None for no answers."""
    bins = calibration_bins(confidences, correct, bin_size)
    if not bins:
        return None
    n = sum(b["n"] for b in bins)
    gaps = [(b["n"] / n, abs(b["confidence"] - b["accuracy"])) for b in bins]
    if norm == "l2":
        return math.sqrt(sum(w * g * g for w, g in gaps))
    if norm == "l1":
        return sum(w * g for w, g in gaps)
    raise ValueError(f"norm must be 'l1' or 'l2', got {norm!r}")


def gold_fraction(gold: Iterable[str], found: Iterable[str]) -> float | None:
    """Share of distinct gold docids among `found`; None when there is no gold to find."""
    g = set(gold)
    return len(g.intersection(found)) / len(g) if g else None


def _stats(values: Sequence[float]) -> dict[str, float | None]:
    return {"mean": mean(values), "median": median(values)}


def run_metrics(
    meta: dict[str, Any],
    trajectories: dict[str, dict[str, Any]],
    judgments: dict[str, dict[str, Any]],
    *,
    bin_size: int = CALIBRATION_BIN,
) -> dict[str, Any]:
    """Every figure of one run. Accuracy is over judged queries (a query needs a gold answer to be judged);
    calibration is over judged queries that gave an answer (a no-answer states no confidence). An `unjudged`
    judgment (the grader never replied in its format) holds no verdict: it is left out and counted apart."""
    trajs = list(trajectories.values())
    first = trajs[0] if trajs else {}
    matched = [(trajectories[s], j) for s, j in judgments.items() if s in trajectories and judges(j, trajectories[s])]
    judged = [(t, j) for t, j in matched if not is_unjudged(j)]
    unjudged = [j for _, j in matched if is_unjudged(j)]
    outcomes = [bool(j.get("correct")) for _, j in judged]
    answered = [(t, j) for t, j in judged if j.get("method") != "empty" and not is_empty_answer(t)]
    confidences = [_confidence(t, j) for t, j in answered]
    no_answer = Counter(str(t.get("stop_reason")) for t in trajs if is_empty_answer(t))
    tools = sorted({name for t in trajs for name in (t.get("tool_calls") or {})})
    tool_totals = [float(sum((t.get("tool_calls") or {}).values())) for t in trajs]
    gold_r = [gold_fraction(t.get("gold_doc_ids") or (), t.get("retrieved_docids") or ()) for t in trajs]
    cov = [gold_fraction(t.get("gold_doc_ids") or (), t.get("surfaced_docids") or ()) for t in trajs]
    searched = any(t.get("retrieved_docids") for t in trajs) or "search" in tools
    agent_cost = [float(t.get("cost_usd") or 0.0) for t in trajs]
    judge_cost = [float(j.get("cost_usd") or 0.0) for _, j in matched]
    return {
        "system": meta.get("system") or first.get("system"),
        "model": meta.get("model") or first.get("model"),
        "k": meta.get("k"),
        "retriever": first.get("retriever") or meta.get("retriever") or (meta.get("config") or {}).get("retriever"),
        "corpus": meta.get("corpus"),
        "corpus_docs": meta.get("corpus_docs"),
        "repeat": meta.get("repeat"),
        "n_queries": len(trajs),
        "n_judged": len(judged),
        "n_unjudged": len(unjudged),
        "n_correct": sum(outcomes),
        "accuracy": mean(outcomes),
        "accuracy_ci95": wilson_ci(sum(outcomes), len(outcomes)),
        "accuracy_interval": "wilson",
        "too_many_unjudged": bool(trajs) and (len(trajs) - len(judged)) > UNJUDGED_FLAG * len(trajs),
        "no_answers": sum(no_answer.values()),
        "no_answers_by_stop_reason": dict(sorted(no_answer.items())),
        "stop_reasons": dict(sorted(Counter(str(t.get("stop_reason")) for t in trajs).items())),
        "errors": sum(1 for t in trajs if t.get("error")),
        "model_calls": _stats([float(t.get("model_calls") or 0) for t in trajs]),
        "tool_calls": _stats(tool_totals),
        "tool_calls_by_tool": {
            name: _stats([float((t.get("tool_calls") or {}).get(name, 0)) for t in trajs]) for name in tools
        },
        "tool_calls_per_query": tool_totals,
        "agent_usd_per_query": mean(agent_cost),
        "judge_usd_per_query": mean(judge_cost),
        "agent_usd_total": sum(agent_cost),
        "cost_lower_bound": any(t.get("cancelled_calls") for t in trajs),  # cut calls: billed, in no reply's usage
        "judge_usd_total": sum(judge_cost),
        "tokens_per_query": {
            k: mean([float((t.get("usage") or {}).get(k) or 0) for t in trajs])
            for k in ("input_tokens", "cached_input_tokens", "output_tokens")
        },
        "gold_R": mean([g for g in gold_r if g is not None]) if searched else None,
        "cov_mean": mean([c for c in cov if c is not None]),
        "n_with_gold": sum(1 for g in gold_r if g is not None),
        "workspace_docs": _stats([float(t.get("workspace_docs") or 0) for t in trajs]),
        "elapsed_s": _stats([float(t.get("elapsed_s") or 0.0) for t in trajs]),
        "calibration_error": calibration_error(confidences, [bool(j.get("correct")) for _, j in answered], bin_size),
        "calibration_bins": calibration_bins(confidences, [bool(j.get("correct")) for _, j in answered], bin_size),
        "n_calibration": len(answered),
        "judge_methods": dict(sorted(Counter(str(j.get("method")) for _, j in judged).items())),
    }


def per_query_rows(
    trajectories: dict[str, dict[str, Any]], judgments: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """One row per query (for paired comparisons between runs in report.json): None where not judged; with the
    query's interaction-space figures (eval/interaction.py). Computed by forked workers on a large run
    (eval/forkmap.py)."""
    items = list(trajectories.items())
    return fork_map(lambda a, b: [_row(t, judgments.get(stem)) for stem, t in items[a:b]], len(items))


def _row(t: dict[str, Any], j: dict[str, Any] | None) -> dict[str, Any]:
    j = j if j is not None and judges(j, t) else None
    unjudged = j is not None and is_unjudged(j)
    return {
        "query_id": t.get("query_id"),
        "correct": None if j is None or unjudged else bool(j.get("correct")),
        "unjudged": unjudged,
        "method": None if j is None else j.get("method"),
        "stop_reason": t.get("stop_reason"),
        "model_calls": t.get("model_calls"),
        "tool_calls": sum((t.get("tool_calls") or {}).values()),
        "agent_usd": t.get("cost_usd"),
        "judge_usd": None if j is None else j.get("cost_usd"),
        "gold_R": gold_fraction(t.get("gold_doc_ids") or (), t.get("retrieved_docids") or ()),
        "cov": gold_fraction(t.get("gold_doc_ids") or (), t.get("surfaced_docids") or ()),
        **interaction(t, t.get("gold_doc_ids") or ()),
    }


def _confidence(trajectory: dict[str, Any], judgment: dict[str, Any]) -> float:
    """The grader's reading of the stated confidence, else the agent's own parse, else 100 (the grader's rule
    for a response that states none)."""
    for value in (judgment.get("confidence"), trajectory.get("confidence")):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return min(max(float(value), 0.0), 100.0)
    return 100.0
