"""report.md / report.json / PNGs from run directories (and from `eval-retrieval` results).

The main table mirrors the paper's (system, model, accuracy, no-answers, tool calls, $/query, gold_R, cov_mean),
with the bootstrap interval next to accuracy so a reader does not over-read small gaps, and the unjudged count
beside it (queries whose grader never replied in its format: left out of accuracy, never counted right or wrong).
Everything in the Markdown is also in report.json with full precision, for scripts. A run directory may carry a
`cell.json` (written by the sweep job: system, model, k, corpus, corpus_docs, repeat), which labels it in sweep
plots.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rise_batch.eval.metrics import CALIBRATION_BIN, per_query_rows, run_metrics
from rise_batch.eval.plots import plot_frontier, plot_recall, plot_recalls, plot_sweep, plot_tool_calls, system_name
from rise_batch.eval.report_html import render_html, write_html, write_trajectories
from rise_batch.eval.rundir import RunData, load_run
from rise_batch.io import read_json, write_json_atomic
from rise_batch.queries import gold_label, read_qrels
from rise_batch.storage import ObjectPath, location, publish_tree


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
    meta = dict(run.meta)
    if (run.path / "cell.json").is_file():
        meta.update(read_json(run.path / "cell.json"))
    trajectories = regold(run.trajectories, qrels) if qrels else run.trajectories
    summary = run_metrics(meta, trajectories, run.judgments, bin_size=bin_size)
    summary["gold"] = gold_label(qrels=qrels) if qrels else meta.get("gold", gold_label())
    summary["per_query"] = per_query_rows(trajectories, run.judgments)
    summary["run_dir"] = str(run.path)
    summary["unreadable_files"] = list(run.unreadable)
    return summary, trajectories


def _pct(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{100 * x:.{digits}f}"


def _num(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _usd(x: float | None) -> str:
    return "–" if x is None else f"${x:.4f}" if x < 0.1 else f"${x:.3f}"


def md_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *("| " + " | ".join(r) + " |" for r in rows)]


def run_label(s: dict[str, Any], summaries: Sequence[dict[str, Any]]) -> str:
    """A run's name on the tables: its system, with K, corpus and repeat when those vary between the runs."""
    system = system_name(s.get("system")) + (f" (K={s['k']})" if _varies(summaries, "k") else "")
    if _varies(summaries, "corpus"):
        system += f" · {s.get('corpus')}"
    if _varies(summaries, "repeat"):
        system += f" #{s.get('repeat')}"
    return system


def main_rows(summaries: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The paper's table as (head, rows) of text cells: Markdown and HTML both draw it."""
    head = ["System", "Model", "Accuracy % [95% CI]", "Unjudged", "No-answers", "Tool calls", "$/query", "gold_R %"]
    head.append("cov_mean %")
    rows = []
    for s in summaries:
        ci = s.get("accuracy_ci95")
        acc = _pct(s.get("accuracy")) + (f" [{_pct(ci[0])}, {_pct(ci[1])}]" if ci else "")
        rows.append(
            [
                run_label(s, summaries),
                str(s.get("model")),
                acc,
                str(s.get("n_unjudged", 0)),
                f"{s.get('no_answers', 0)}/{s.get('n_queries', 0)}",
                _num((s.get("tool_calls") or {}).get("mean")),
                _usd(s.get("agent_usd_per_query")),
                _pct(s.get("gold_R")),
                _pct(s.get("cov_mean")),
            ]
        )
    return head, rows


def main_table(summaries: Sequence[dict[str, Any]]) -> list[str]:
    return md_table(*main_rows(summaries))


def detail_rows(summaries: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    tools = sorted({t for s in summaries for t in s.get("tool_calls_by_tool", {})})
    head = ["Run", "Judged", "Calib. err %", "Model calls mean/median", "Tool calls median"]
    head += [f"{t} mean" for t in tools] + ["Workspace docs mean", "Judge $/query", "No-answers by stop reason"]
    rows = []
    for i, s in enumerate(summaries, 1):
        calls = s.get("model_calls") or {}
        by_tool = s.get("tool_calls_by_tool", {})
        reasons = ", ".join(f"{k} {v}" for k, v in s.get("no_answers_by_stop_reason", {}).items()) or "–"
        judged = f"{s.get('n_judged', 0)}/{s.get('n_queries', 0)}"
        if s.get("n_unjudged"):
            judged += f" ({s['n_unjudged']} unjudged)"
        rows.append(
            [
                str(i),
                judged,
                _pct(s.get("calibration_error")),
                f"{_num(calls.get('mean'))} / {_num(calls.get('median'), 0)}",
                _num((s.get("tool_calls") or {}).get("median"), 0),
                *[_num((by_tool.get(t) or {}).get("mean")) for t in tools],
                _num((s.get("workspace_docs") or {}).get("mean"), 0),
                _usd(s.get("judge_usd_per_query")),
                reasons,
            ]
        )
    return head, rows


def detail_table(summaries: Sequence[dict[str, Any]]) -> list[str]:
    return md_table(*detail_rows(summaries))


def _varies(summaries: Sequence[dict[str, Any]], key: str) -> bool:
    return len({json.dumps(s.get(key)) for s in summaries}) > 1


def retrieval_section(result: dict[str, Any], name: str) -> list[str]:
    """A retrieval-only table from `rise-batch eval-retrieval --out` JSON ({summary: {recall: {k: v}}, ...})."""
    s = result.get("summary", {})
    recall = s.get("recall", {})
    ks = sorted(recall, key=int)
    lines = [f"### {name}", ""]
    lines.append(
        f"{s.get('n_queries', 0)} queries with gold documents ({s.get('n_skipped_no_gold', 0)} without); "
        f"retriever {retriever_of(result)}."
    )
    lines += ["", "| " + " | ".join(f"recall@{k} %" for k in ks) + " |", "|" + "---|" * len(ks)]
    lines.append("| " + " | ".join(_pct(recall[k]) for k in ks) + " |")
    return lines


def retriever_of(result: dict[str, Any]) -> str:
    """The retriever an eval-retrieval result was measured with (results written before retrievers: bm25)."""
    return str(result.get("summary", {}).get("retriever") or "bm25")


def retrievers_rows(retrieval: Sequence[tuple[str, dict[str, Any]]]) -> tuple[list[str], list[list[str]]]:
    """Every retrieval result on one table, a row each with its retriever: retrievers side by side."""
    ks = sorted({k for _, r in retrieval for k in r.get("summary", {}).get("recall", {})}, key=int)
    head = ["Result", "Retriever", "Queries", *(f"recall@{k} %" for k in ks)]
    rows = []
    for name, r in retrieval:
        s = r.get("summary", {})
        cells = [_pct(s.get("recall", {}).get(k)) for k in ks]
        rows.append([name, retriever_of(r), str(s.get("n_queries", 0)), *cells])
    return head, rows


def retrievers_table(retrieval: Sequence[tuple[str, dict[str, Any]]]) -> list[str]:
    return md_table(*retrievers_rows(retrieval))


ACCURACY_NOTE = (
    "Accuracy: share of judged queries graded correct, with a percentile bootstrap 95% interval (2,000 "
    "resamples, seed 0). Unjudged: queries whose grader reply was not in the grader format even after a "
    "re-ask; they are left out of accuracy (re-run `judge` to grade them). No-answers: runs that ended "
    "without an answer (budget, clock, API error, context). "
    "Tool calls: mean per query. $/query: mean agent cost (the judge's is in the detail table). gold_R: "
    "share of gold documents inside the search union; cov_mean: share surfaced to the agent in reads, "
    "previews or shell output (means over queries with gold documents)."
)
CALIBRATION_NOTE = (
    f"Calibration error: RMS gap between stated confidence and accuracy over bins of {CALIBRATION_BIN} "
    "answers sorted by confidence (the remainder joins the last bin; fewer answers make one bin), "
    "summed over all bins, over queries that gave an answer."
)


def gold_note(summaries: Sequence[dict[str, Any]]) -> str:
    return "Gold of gold_R and cov_mean: " + ", ".join(sorted({str(s.get("gold")) for s in summaries})) + "."


def run_notes(summaries: Sequence[dict[str, Any]]) -> list[str]:
    """Each run's directory, numbered as in the detail table, with how many of its queries were judged."""
    return [
        f"{i}. `{s.get('run_dir')}`"
        + (f" ({s['n_judged']} of {s['n_queries']} queries judged)" if s["n_judged"] < s["n_queries"] else "")
        for i, s in enumerate(summaries, 1)
    ]


def render_markdown(
    summaries: Sequence[dict[str, Any]], plots: Sequence[str], retrieval: Sequence[tuple[str, dict[str, Any]]] = ()
) -> str:
    out = ["# RISE evaluation report", ""]
    if summaries:
        n = sorted({s.get("n_queries", 0) for s in summaries})
        out += [f"{len(summaries)} run(s), {'/'.join(map(str, n))} queries each.", ""]
        out += main_table(summaries)
        out += ["", ACCURACY_NOTE, "", gold_note(summaries), "", "## Details", ""]
        out += detail_table(summaries)
        out += ["", CALIBRATION_NOTE, "", *run_notes(summaries), ""]
    if retrieval:
        out += ["## Retrieval only", ""]
    if len(retrieval) > 1:
        out += retrievers_table(retrieval) + [""]
    for name, result in retrieval:
        out += retrieval_section(result, name) + [""]
    if plots:
        out += ["## Figures", ""] + [f"![{Path(p).stem}]({Path(p).name})" for p in plots] + [""]
    return "\n".join(out)


def html_page(
    summaries: Sequence[dict[str, Any]],
    figures: Sequence[Path],
    retrieval: Sequence[tuple[str, dict[str, Any]]],
    rows: Sequence[dict[str, Any]],
) -> str:
    """report.html: the Markdown's tables, notes and figures, then the query table over `rows` (query_row)."""
    tables = []
    if summaries:
        tables += [("Runs", *main_rows(summaries)), ("Details", *detail_rows(summaries))]
    if retrieval:
        tables.append(("Retrieval only", *retrievers_rows(retrieval)))
    notes = [ACCURACY_NOTE, gold_note(summaries), CALIBRATION_NOTE, *run_notes(summaries)] if summaries else []
    labels = [run_label(s, summaries) for s in summaries]
    runs = [
        {"name": f"{i}. {label} · {s.get('model')}", "system": s.get("system"), "run_dir": s.get("run_dir")}
        for i, (label, s) in enumerate(zip(labels, summaries, strict=True), 1)
    ]
    return render_html(tables, notes, figures, runs, rows)


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
    summaries: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    for i, d in enumerate(run_dirs):  # one run in memory at a time: its trajectories go to the page's data files
        run = load_run(d)
        summary, trajectories = summarize_loaded(run, bin_size=bin_size, qrels=qrels)
        summaries.append(summary)
        rows += write_trajectories(out, i, run.path, trajectories, summary["per_query"])
    retrieval = [(Path(f).stem, read_json(Path(f))) for f in retrieval_files]
    plots = [
        plot_frontier(summaries, out / "accuracy_vs_cost.png"),
        plot_tool_calls(summaries, out / "tool_calls.png"),
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
    (out / "report.md").write_text(render_markdown(summaries, written, retrieval), encoding="utf-8")
    figures = [out / Path(p).name for p in plots if p is not None]
    write_html(out, html_page(summaries, figures, retrieval, rows))
    report = {
        "runs": summaries,
        "retrieval": [{"name": n, "retriever": retriever_of(r), "summary": r.get("summary", {})} for n, r in retrieval],
        "plots": written,
    }
    write_json_atomic(out / "report.json", report)
    if isinstance(final, ObjectPath):
        publish_tree(out, final, "report.json")
        shutil.rmtree(out, ignore_errors=True)
    return report
