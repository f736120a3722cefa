"""PNG figures of a report: the accuracy/cost frontier, tool-call distributions, sweeps over K and corpus size.

matplotlib is imported inside each function and pinned to the Agg backend, so the report runs on a headless
cluster node and importing this module costs nothing. Each function takes the run summaries (dicts from
rise_batch.eval.report.summarize_run) and returns the path it wrote, or None when the figure would be empty
(one K only, no cost recorded...), so a report never contains a meaningless chart.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rise_batch.agent.systems import SYSTEMS


def system_name(system: Any) -> str:
    """The label a system's registry entry gives it (agent/systems.py), else the name as recorded in the run."""
    known = SYSTEMS.get(str(system))
    return known.label if known is not None else str(system)


def run_labels(summaries: Sequence[dict[str, Any]]) -> list[str]:
    """System / model, plus K, retriever, corpus and repeat where they differ between the runs shown."""
    varies = {key: len({repr(s.get(key)) for s in summaries}) > 1 for key in ("k", "retriever", "corpus", "repeat")}
    labels = []
    for s in summaries:
        label = f"{system_name(s.get('system'))} / {s.get('model')}"
        if varies["k"]:
            label += f" / K={s.get('k')}"
        if varies["retriever"]:
            label += f" / {s.get('retriever')}"
        if varies["corpus"]:
            label += f" / {s.get('corpus')}"
        if varies["repeat"]:
            label += f" #{s.get('repeat')}"
        labels.append(label)
    return labels


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _pyplot().close(fig)
    return path


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both cost (lower) and accuracy (higher), by cost."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front, best = [], float("-inf")
    for i in order:
        if points[i][1] > best:
            front.append(i)
            best = points[i][1]
    return front


def frontier_steps(points: Sequence[tuple[float, float]]) -> tuple[list[float], list[float]]:
    """The frontier as drawn: a staircase of the best accuracy reached at or below each cost, from the cheapest
    frontier run to the costliest run. Empty when it would have no length (one run, or every run at one cost): a
    frontier of one point used to be a zero-length line, invisible while the legend named it."""
    front = pareto_front(points)
    xs = [points[i][0] for i in front] + [max(x for x, _ in points)] if points else []
    ys = [points[i][1] for i in front] + [points[front[-1]][1]] if points else []
    return (xs, ys) if len(points) > 1 and xs[-1] > xs[0] else ([], [])


def plot_frontier(summaries: Sequence[dict[str, Any]], path: Path) -> Path | None:
    fig = frontier_figure(summaries)
    return _save(fig, path) if fig is not None else None


def frontier_figure(summaries: Sequence[dict[str, Any]]) -> Any:
    """The accuracy/cost figure (None without a run that has both); plot_frontier saves it."""
    rows = [s for s in summaries if s.get("accuracy") is not None and s.get("agent_usd_per_query") is not None]
    if not rows:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    pts = [(float(s["agent_usd_per_query"]), 100 * float(s["accuracy"])) for s in rows]
    for s, (x, y), label in zip(rows, pts, run_labels(rows), strict=True):
        ci = s.get("accuracy_ci95")
        yerr = [[y - 100 * ci[0]], [100 * ci[1] - y]] if ci else None
        judged = f"{s.get('n_judged', 0)}/{s.get('n_queries', 0)} judged"
        ax.errorbar(x, y, yerr=yerr, fmt="o", capsize=3, label=f"{label} ({judged})")
        ax.annotate(judged, (x, y), textcoords="offset points", xytext=(6, 4), fontsize=7)
    xs, ys = frontier_steps(pts)
    if xs:
        ax.plot(xs, ys, "k--", lw=1, drawstyle="steps-post", label="frontier")
    costs = [x for x, _ in pts if x > 0]
    if costs and max(costs) / min(costs) > 10 and len(costs) == len(pts):
        ax.set_xscale("log")
    ax.set_xlabel("agent cost per query (USD)")
    ax.set_ylim(-2, 102)
    ax.set_ylabel("accuracy (%)")
    ax.set_title("Accuracy vs cost per query (bars: Wilson 95% CI)")
    ax.legend(fontsize=7, loc="best")
    return fig


def plot_tool_calls(summaries: Sequence[dict[str, Any]], path: Path) -> Path | None:
    rows = [s for s in summaries if s.get("tool_calls_per_query")]
    if not rows:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(rows) + 2), 4.5))
    ax.boxplot([s["tool_calls_per_query"] for s in rows], showmeans=True)
    ax.set_xticks(range(1, len(rows) + 1), run_labels(rows), rotation=30, ha="right", fontsize=7)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("tool calls per query")
    ax.set_title("Tool calls per query (box: quartiles, triangle: mean)")
    return _save(fig, path)


def plot_gold_steps(summaries: Sequence[dict[str, Any]], path: Path) -> Path | None:
    """Distribution of gold_in_workspace_step per run: how many queries had a gold document linked at each step,
    and how many never did (over queries with gold documents, in runs that searched); None when no run has any."""
    runs = [
        (label, [r.get("gold_in_workspace_step") for r in s.get("per_query") or () if r.get("gold_read") is not None])
        for s, label in zip(summaries, run_labels(summaries), strict=True)
    ]
    searched = [any(r.get("search_calls") for r in s.get("per_query") or ()) for s in summaries]
    runs = [(label, steps) for (label, steps), did in zip(runs, searched, strict=True) if steps and did]
    if not runs:
        return None
    plt = _pyplot()
    top = max((x for _, steps in runs for x in steps if x is not None), default=0)
    slots = list(range(top + 1)) + ["never"]
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(slots) * len(runs) + 2), 4.5))
    width = 0.8 / len(runs)
    for i, (label, steps) in enumerate(runs):
        counts = [sum(1 for x in steps if x == slot or (slot == "never" and x is None)) for slot in slots]
        ax.bar([j + i * width for j in range(len(slots))], counts, width, label=f"{label} (n={len(steps)})")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(slots))], [str(x) for x in slots])
    ax.set_xlabel("step at which a gold document was first linked into the workspace")
    ax.set_ylabel("queries")
    ax.set_title("When the gold entered the workspace (queries with gold documents)")
    ax.legend(fontsize=7)
    return _save(fig, path)


def _sweep(summaries: Sequence[dict[str, Any]], key: str) -> dict[str, list[tuple[float, float]]]:
    """Series label -> [(x, mean accuracy over repeats)] for runs that differ in `key` only."""
    groups: dict[tuple, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for s in summaries:
        x = s.get(key)
        if x is None or s.get("accuracy") is None:
            continue
        other = tuple((k, s.get(k)) for k in ("system", "model", "k", "corpus") if k not in (key, _SAME[key]))
        groups[other][float(x)].append(100 * float(s["accuracy"]))
    series = {}
    for other, points in groups.items():
        if len(points) > 1:
            label = " / ".join(
                system_name(v) if k == "system" else f"{k}={v}" if k == "k" else str(v) for k, v in other
            )
            series[label] = sorted((x, sum(v) / len(v)) for x, v in points.items())
    return series


_SAME = {"k": "k", "corpus_docs": "corpus"}  # a corpus is named by its label and sized by corpus_docs


def plot_sweep(summaries: Sequence[dict[str, Any]], key: str, path: Path) -> Path | None:
    """Accuracy against K (`key="k"`) or corpus size (`key="corpus_docs"`), one line per system/model."""
    series = _sweep(summaries, key)
    if not series:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for label, pts in sorted(series.items()):
        ax.plot([x for x, _ in pts], [y for _, y in pts], "o-", label=label)
    ax.set_xscale("log")
    xs = sorted({x for pts in series.values() for x, _ in pts})
    ax.set_xticks(xs, [f"{x:,.0f}" for x in xs])
    ax.minorticks_off()
    ax.set_xlabel({"k": "K (documents per sub-query)", "corpus_docs": "corpus size (documents)"}[key])
    ax.set_ylim(-2, 102)
    ax.set_ylabel("accuracy (%)")
    ax.set_title("Accuracy vs " + {"k": "K", "corpus_docs": "corpus size"}[key])
    ax.legend(fontsize=7)
    return _save(fig, path)


def plot_recall(recall: dict[str, float], path: Path, retriever: str = "bm25") -> Path | None:
    """Retrieval-only report: recall@K of gold documents against K, for one eval-retrieval result."""
    return plot_recalls({retriever: recall}, path, f"{retriever} recall@K of gold documents")


def plot_recalls(series: dict[str, dict[str, float]], path: Path, title: str = "") -> Path | None:
    """Recall@K against K, one line per labelled result: retrievers side by side on one figure."""
    series = {label: r for label, r in series.items() if r}
    if not series:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    many = False
    for label, recall in series.items():
        pts = sorted((int(k), 100 * float(v)) for k, v in recall.items() if v is not None)
        ax.plot([k for k, _ in pts], [v for _, v in pts], "o-", label=label)
        many = many or len(pts) > 1
    if many:
        ax.set_xscale("log")
    ax.set_xlabel("K")
    ax.set_ylabel("gold documents in the top K (%)")
    ax.set_title(title or "recall@K of gold documents by retriever")
    if len(series) > 1:
        ax.legend(fontsize=7, loc="best")
    return _save(fig, path)
