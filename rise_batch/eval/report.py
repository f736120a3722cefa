"""report.md / report.json / PNGs from run directories (and from `eval-retrieval` results).

The main table mirrors the paper's (system, model, accuracy, no-answers, tool calls, $/query, gold_R, cov_mean),
with the Wilson interval and judged/queries next to accuracy so a reader does not over-read small gaps or small n,
and the unjudged count beside it (queries whose grader never replied in its format: left out of accuracy, never
counted right or wrong). Each run gets its interaction-space figures (`interaction`) and what its directory spent
(`spent`: agents, judge, total; report_spend.py), and every two runs that differ in one factor of the grid a paired
comparison over their common queries (`paired`; comparisons.py says which pairs). The Markdown is
report_md.py's; report.html (report_html.py) draws the same blocks (report_rows.py), and lists every query with
its trajectories. Everything in the Markdown is also in report.json with full precision, for scripts. A run
directory may carry a `cell.json` (written by the sweep job: system, model, k, corpus, corpus_docs, repeat),
which labels it in sweep plots.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rise_batch.eval.comparisons import factor_pairs, pair_title
from rise_batch.eval.forkmap import fork_each
from rise_batch.eval.interaction_stats import interaction_summary
from rise_batch.eval.metrics import CALIBRATION_BIN, per_query_rows, run_metrics
from rise_batch.eval.paired import paired_comparison
from rise_batch.eval.plots import (
    plot_frontier,
    plot_gold_steps,
    plot_recall,
    plot_recalls,
    plot_sweep,
    plot_tool_calls,
)
from rise_batch.eval.report_html import render_html, write_html, write_trajectories
from rise_batch.eval.report_md import render_markdown
from rise_batch.eval.report_rows import report_blocks, retriever_of, run_names
from rise_batch.eval.report_spend import directory_spend, total_spend
from rise_batch.eval.rundir import RunData, load_run
from rise_batch.io import read_json, write_json_atomic
from rise_batch.queries import gold_label, read_qrels
from rise_batch.storage import ObjectPath, location, publish_tree

log = logging.getLogger(__name__)


def regold(trajectories: dict[str, dict[str, Any]], qrels: str | Path) -> dict[str, dict[str, Any]]:
    """The trajectories with their gold documents taken from a TREC qrels file (gold_R and cov are then scored
    against it); a qrels file naming none of the run's queries is refused, not scored 0."""
    table = read_qrels(qrels)
    if trajectories and not any(str(t.get("query_id")) in table for t in trajectories.values()):
        raise ValueError(f"{qrels}: names none of the run's {len(trajectories)} query ids; it must use the query ids")
    return {s: {**t, "gold_doc_ids": list(table.get(str(t.get("query_id")), ()))} for s, t in trajectories.items()}


def summarize_run(
    run_dir: str | Path, *, bin_size: int = CALIBRATION_BIN, qrels: str | Path | None = None
) -> dict[str, Any]:
    return summarize_loaded(load_run(run_dir), bin_size=bin_size, qrels=qrels)[0]


def summarize_loaded(
    run: RunData, *, bin_size: int = CALIBRATION_BIN, qrels: str | Path | None = None
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """A loaded run's summary, and its trajectories as scored (gold from `qrels` when given)."""
    meta = dict(run.meta) | (run.cell or {})
    trajectories = regold(run.trajectories, qrels) if qrels else run.trajectories
    summary = run_metrics(meta, trajectories, run.judgments, bin_size=bin_size)
    summary["gold"] = gold_label(qrels=qrels) if qrels else meta.get("gold", gold_label())
    summary["per_query"] = per_query_rows(trajectories, run.judgments)
    summary["interaction"] = interaction_summary(summary["per_query"])
    summary["run_dir"] = str(run.path)
    summary["unreadable_files"] = list(run.unreadable)
    return summary, trajectories


ROW_LIST_MAX = 20  # entries a per-query row of report.json keeps of each list (the steps where gold was shown...)


def bounded_rows(summary: dict[str, Any]) -> dict[str, Any]:
    """A summary as report.json keeps it: each per-query row's lists (steps that surfaced or read a gold document,
    the workspace's growth at each search) cut to their first ROW_LIST_MAX entries, the full length of each cut list
    in the row's `cut`, so a run of 300-step trajectories does not make report.json grow with the steps (report.html's
    data files keep them whole)."""
    rows = []
    for row in summary.get("per_query") or ():
        long = {k: len(v) for k, v in row.items() if isinstance(v, list) and len(v) > ROW_LIST_MAX}
        rows.append(row | {k: row[k][:ROW_LIST_MAX] for k in long} | ({"cut": long} if long else {}))
    return summary | {"per_query": rows}


def write_report(
    run_dirs: Sequence[str | Path],
    out_dir: str | Path,
    *,
    retrieval_files: Sequence[str | Path] = (),
    bin_size: int = CALIBRATION_BIN,
    qrels: str | Path | None = None,
) -> dict[str, Any]:
    """Summarise every run (gold from `qrels` when given), draw the figures that apply, write report.md,
    report.html (with one data file per trajectory under report_html/) and report.json into `out_dir`."""
    final = location(out_dir)  # in object storage: drawn on local disk, then each file put once, report.json last
    out = Path(tempfile.mkdtemp(prefix="rise-report-")) if isinstance(final, ObjectPath) else final
    out.mkdir(parents=True, exist_ok=True)

    def one_run(i: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Run i read, summarised, and its trajectories written as the page's data files: its summary and page rows."""
        run = load_run(run_dirs[i])
        summary, trajectories = summarize_loaded(run, bin_size=bin_size, qrels=qrels)
        summary["spent"] = directory_spend(run.path, run)
        rows = write_trajectories(out, i, run.path, trajectories, summary["per_query"], summary["unreadable_files"])
        return summary, rows

    # a worker per core, each with one run in memory at a time; one run alone is spread over the cores by forkmap.
    # Runs in object storage are read here: a forked copy of this process's S3 client is not safe to use.
    local = all(isinstance(location(d), Path) for d in run_dirs)
    done = fork_each(one_run, len(run_dirs), processes=None if local else 1)
    summaries = [summary for summary, _ in done]
    rows = [row for _, page_rows in done for row in page_rows]
    for line in (line for s in summaries for line in s["unreadable_files"]):
        log.warning("report: skipped %s", line)
    retrieval = [(location(f).stem, read_json(f)) for f in retrieval_files]
    plots = [
        plot_frontier(summaries, out / "accuracy_vs_cost.png"),
        plot_tool_calls(summaries, out / "tool_calls.png"),
        plot_gold_steps(summaries, out / "gold_in_workspace_step.png"),
        plot_sweep(summaries, "k", out / "accuracy_vs_k.png"),
        plot_sweep(summaries, "corpus_docs", out / "accuracy_vs_corpus_size.png"),
        *[
            plot_recall(r.get("summary", {}).get("recall", {}), out / f"recall_{n}.png", retriever_of(r))
            for n, r in retrieval
        ],
    ]
    if len(retrieval) > 1:  # retrievers side by side on one figure
        series = {f"{n} ({retriever_of(r)})": r.get("summary", {}).get("recall", {}) for n, r in retrieval}
        plots.append(plot_recalls(series, out / "recall_retrievers.png"))
    written = [str(final / Path(p).name) for p in plots if p is not None]
    pairs = factor_pairs(summaries)
    compared = fork_each(lambda i: paired_comparison(summaries[pairs[i].a], summaries[pairs[i].b]), len(pairs))
    paired = [
        p | {"factor": pair.factor, "a_run": pair.a + 1, "b_run": pair.b + 1, "title": pair_title(summaries, pair)}
        for pair, p in zip(pairs, compared, strict=True)
        if p is not None  # no query in common
    ]
    blocks = report_blocks(summaries, retrieval, paired)
    (out / "report.md").write_text(render_markdown(blocks, written), encoding="utf-8")
    figures = [out / Path(p).name for p in plots if p is not None]
    write_html(out, render_html(blocks, figures, run_names(summaries), rows))
    report = {
        "runs": summaries,
        "paired": paired,
        "spent": total_spend(s["spent"] for s in summaries),
        "retrieval": [{"name": n, "retriever": retriever_of(r), "summary": r.get("summary", {})} for n, r in retrieval],
        "plots": written,
    }
    write_json_atomic(out / "report.json", report | {"runs": [bounded_rows(s) for s in summaries]})
    if isinstance(final, ObjectPath):
        publish_tree(out, final, "report.json")
        shutil.rmtree(out, ignore_errors=True)
    return report
