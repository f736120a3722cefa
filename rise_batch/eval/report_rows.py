"""What the report says, as blocks of text that report.md (report_md.py) and report.html (report_html.py) both draw:
headings, paragraphs, warnings, tables as (head, rows) of text cells, and the list of run directories. One builder
for both pages, so the HTML shows exactly the Markdown's rows. Pure: no I/O.

Accuracy is shown everywhere with its Wilson 95% interval and "n judged / n queries" beside it, and a run where
more than 10% of the queries have no verdict gets a visible warning line: its accuracy speaks only for the judged.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rise_batch.eval.comparisons import COMPARISONS_NOTE, NO_COMPARISON, comparison_rows, numbered_labels
from rise_batch.eval.interaction_stats import INTERACTION_NOTE, interaction_rows
from rise_batch.eval.metrics import CALIBRATION_BIN, UNJUDGED_FLAG
from rise_batch.eval.paired import paired_intro, paired_outro, paired_rows
from rise_batch.eval.plots import system_name
from rise_batch.eval.report_spend import SPEND_NOTE, spend_rows

Table = tuple[list[str], list[list[str]]]  # (head, rows) of text cells
# A block: ("h2" | "h3" | "p", text), ("warnings", [text, ...]), ("table", head, rows) or ("runs", [(run_dir, note)])
Block = tuple[Any, ...]

ACCURACY_NOTE = (
    "Accuracy: share of judged queries graded correct, with a Wilson 95% interval, and judged / queries. "
    "Unjudged: queries whose grader reply was not in the grader format even after a "
    "re-ask; they are left out of accuracy (re-run `judge` to grade them). No-answers: runs that ended "
    "without an answer (budget, clock, API error, context). "
    "Tool calls: mean per query. $/query: mean agent cost, then with the judge's (Spend below). gold_R: "
    "share of gold documents inside the search union; cov_mean: share surfaced to the agent in reads, "
    "previews or shell output (means over queries with gold documents)."
)
CALIBRATION_NOTE = (
    f"Calibration error: RMS gap between stated confidence and accuracy over bins of {CALIBRATION_BIN} "
    "answers sorted by confidence (the remainder joins the last bin; fewer answers make one bin), "
    "summed over all bins, over queries that gave an answer."
)


def _pct(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{100 * x:.{digits}f}"


def _num(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _usd(x: float | None) -> str:
    return "–" if x is None else f"${x:.4f}" if x < 0.1 else f"${x:.3f}"


def _varies(summaries: Sequence[dict[str, Any]], key: str) -> bool:
    return len({json.dumps(s.get(key)) for s in summaries}) > 1


def run_label(s: dict[str, Any], summaries: Sequence[dict[str, Any]]) -> str:
    """A run's name on the main table: its system, with K, retriever, corpus and repeat when those vary between the
    runs."""
    system = system_name(s.get("system")) + (f" (K={s['k']})" if _varies(summaries, "k") else "")
    if _varies(summaries, "retriever"):
        system += f" · {s.get('retriever')}"
    if _varies(summaries, "corpus"):
        system += f" · {s.get('corpus')}"
    if _varies(summaries, "repeat"):
        system += f" #{s.get('repeat')}"
    return system


def run_names(summaries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs as report.html's query table and viewer name them (the numbered labels of the sections)."""
    return [
        {"name": name, "system": s.get("system"), "run_dir": s.get("run_dir")}
        for name, s in zip(numbered_labels(summaries), summaries, strict=True)
    ]


def main_rows(summaries: Sequence[dict[str, Any]]) -> Table:
    """The paper's table: a row per run."""
    head = ["System", "Model", "Accuracy % [95% CI] (judged/queries)", "Unjudged", "No-answers", "Tool calls"]
    head += ["$/query", "$/query with judge", "gold_R %", "cov_mean %"]
    rows = []
    for s in summaries:
        ci = s.get("accuracy_ci95")
        acc = _pct(s.get("accuracy")) + (f" [{_pct(ci[0])}, {_pct(ci[1])}]" if ci else "")
        acc += f" ({s.get('n_judged', 0)}/{s.get('n_queries', 0)})"
        rows.append(
            [
                run_label(s, summaries),
                str(s.get("model")),
                acc,
                str(s.get("n_unjudged", 0)),
                f"{s.get('no_answers', 0)}/{s.get('n_queries', 0)}",
                _num((s.get("tool_calls") or {}).get("mean")),
                ("≥ " if s.get("cost_lower_bound") else "") + _usd(s.get("agent_usd_per_query")),  # calls were cut
                ("≥ " if s.get("cost_lower_bound") else "") + _usd(with_judge(s)),
                _pct(s.get("gold_R")),
                _pct(s.get("cov_mean")),
            ]
        )
    return head, rows


def with_judge(s: dict[str, Any]) -> float | None:
    """Agent and judge dollars per query of the run (the judge's total spread over every query, judged or not)."""
    agent, n = s.get("agent_usd_per_query"), s.get("n_queries") or 0
    return None if agent is None or not n else agent + float(s.get("judge_usd_total") or 0.0) / n


def detail_rows(summaries: Sequence[dict[str, Any]]) -> Table:
    tools = sorted({t for s in summaries for t in s.get("tool_calls_by_tool", {})})
    head = ["Run", "Judged", "Calib. err %", "Model calls mean/median", "Tool calls median"]
    head += [f"{t} mean" for t in tools] + ["Workspace docs mean", "Judge $/query", "No-answers by stop reason"]
    rows = []
    for label, s in zip(numbered_labels(summaries), summaries, strict=True):
        calls = s.get("model_calls") or {}
        by_tool = s.get("tool_calls_by_tool", {})
        reasons = ", ".join(f"{k} {v}" for k, v in s.get("no_answers_by_stop_reason", {}).items()) or "–"
        judged = f"{s.get('n_judged', 0)}/{s.get('n_queries', 0)}"
        if s.get("n_unjudged"):
            judged += f" ({s['n_unjudged']} unjudged)"
        rows.append(
            [
                label,
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


def retriever_of(result: dict[str, Any]) -> str:
    """The retriever an eval-retrieval result was measured with (results written before retrievers: bm25)."""
    return str(result.get("summary", {}).get("retriever") or "bm25")


def retrievers_rows(retrieval: Sequence[tuple[str, dict[str, Any]]]) -> Table:
    """Every retrieval result on one table, a row each with its retriever: retrievers side by side."""
    ks = sorted({k for _, r in retrieval for k in r.get("summary", {}).get("recall", {})}, key=int)
    rows = []
    for name, r in retrieval:
        s = r.get("summary", {})
        rows.append(
            [name, retriever_of(r), str(s.get("n_queries", 0)), *(_pct(s.get("recall", {}).get(k)) for k in ks)]
        )
    return ["Result", "Retriever", "Queries", *(f"recall@{k} %" for k in ks)], rows


def retrieval_blocks(result: dict[str, Any], name: str) -> list[Block]:
    """One `rise-batch eval-retrieval --out` result ({summary: {recall: {k: v}}, ...}): a sentence and its recalls."""
    s = result.get("summary", {})
    recall = s.get("recall", {})
    ks = sorted(recall, key=int)
    said = f"{s.get('n_queries', 0)} queries with gold documents ({s.get('n_skipped_no_gold', 0)} without); "
    said += f"retriever {retriever_of(result)}."
    return [("h3", name), ("p", said), ("table", [f"recall@{k} %" for k in ks], [[_pct(recall[k]) for k in ks]])]


def unjudged_warnings(summaries: Sequence[dict[str, Any]]) -> list[str]:
    """A warning per run with more than UNJUDGED_FLAG of its queries without a verdict."""
    lines = []
    for i, s in enumerate(summaries, 1):
        if s.get("too_many_unjudged"):
            n, judged = s.get("n_queries", 0), s.get("n_judged", 0)
            lines.append(
                f"run {i} ({system_name(s.get('system'))}): {n - judged} of {n} queries have no verdict "
                f"(more than {100 * UNJUDGED_FLAG:.0f}%); its accuracy is over the {judged} judged only. Run "
                "`judge` on it (queries without a gold answer cannot be judged)."
            )
    return lines


SKIPPED_SHOWN = 5  # skipped files named per run in the report (report.json's unreadable_files has them all)


def skipped_warnings(summaries: Sequence[dict[str, Any]]) -> list[str]:
    """A warning per run file or events file the report skipped (unreadable, or fields of the wrong types)."""
    lines = []
    for i, s in enumerate(summaries, 1):
        skipped = s.get("unreadable_files") or []
        lines += [f"run {i}: skipped {line}" for line in skipped[:SKIPPED_SHOWN]]
        if len(skipped) > SKIPPED_SHOWN:
            lines.append(f"run {i}: {len(skipped) - SKIPPED_SHOWN} more skipped (report.json: unreadable_files)")
    return lines


def comparison_blocks(
    summaries: Sequence[dict[str, Any]], labels: Sequence[str], paired: Sequence[dict[str, Any]]
) -> list[Block]:
    """The list of paired comparisons (one factor apart each), then each one's table under its title."""
    if not paired:  # two runs or more, none one factor apart from another: say so rather than show nothing
        return [("h2", "Paired comparisons"), ("p", NO_COMPARISON)] if len(summaries) > 1 else []
    out: list[Block] = [("h2", "Paired comparisons"), ("p", COMPARISONS_NOTE)]
    out.append(("table", *comparison_rows(summaries, paired)))
    for p in paired:
        out += [("h3", p["title"]), ("p", paired_intro(labels[p["a_run"] - 1], labels[p["b_run"] - 1], p))]
        out += [("table", *paired_rows(p)), ("p", paired_outro(p))]
    return out


def report_blocks(
    summaries: Sequence[dict[str, Any]],
    retrieval: Sequence[tuple[str, dict[str, Any]]] = (),
    paired: Sequence[dict[str, Any]] = (),
) -> list[Block]:
    """Everything the report says, in order (the figures apart: each page places its own)."""
    out: list[Block] = []
    if summaries:
        n = sorted({s.get("n_queries", 0) for s in summaries})
        out.append(("p", f"{len(summaries)} run(s), {'/'.join(map(str, n))} queries each."))
        if warnings := unjudged_warnings(summaries) + skipped_warnings(summaries):
            out.append(("warnings", warnings))
        out += [("table", *main_rows(summaries)), ("p", ACCURACY_NOTE)]
        out.append(
            ("p", "Gold of gold_R and cov_mean: " + ", ".join(sorted({str(s.get("gold")) for s in summaries})) + ".")
        )
        labels = numbered_labels(summaries)
        if any("spent" in s for s in summaries):  # what the report found spent (report.py reads it)
            out += [("h2", "Spend"), ("table", *spend_rows(labels, summaries)), ("p", SPEND_NOTE)]
        out += [("h2", "Details"), ("table", *detail_rows(summaries)), ("p", CALIBRATION_NOTE)]
        notes = [
            f" ({s['n_judged']} of {s['n_queries']} queries judged)" if s["n_judged"] < s["n_queries"] else ""
            for s in summaries
        ]
        out.append(("runs", [(str(s.get("run_dir")), note) for s, note in zip(summaries, notes, strict=True)]))
        if any(s.get("interaction") for s in summaries):
            out += [
                ("h2", "Interaction space"),
                ("table", *interaction_rows(labels, summaries)),
                ("p", INTERACTION_NOTE),
            ]
        out += comparison_blocks(summaries, labels, paired)
    if retrieval:
        out.append(("h2", "Retrieval only"))
    if len(retrieval) > 1:
        out.append(("table", *retrievers_rows(retrieval)))
    for name, result in retrieval:
        out += retrieval_blocks(result, name)
    return out
