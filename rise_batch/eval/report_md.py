"""report.md: the paper-style tables of run summaries (eval/report.py builds them), the interaction-space and
paired sections, retrieval-only results and the figures.

Accuracy is shown everywhere with its Wilson 95% interval and "n judged / n queries" beside it, and a run where
more than 10% of the queries have no verdict gets a visible warning line: its accuracy speaks only for the judged.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rise_batch.eval.interaction_stats import interaction_section
from rise_batch.eval.metrics import CALIBRATION_BIN, UNJUDGED_FLAG
from rise_batch.eval.paired import paired_section
from rise_batch.eval.plots import run_labels, system_name


def _pct(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{100 * x:.{digits}f}"


def _num(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _usd(x: float | None) -> str:
    return "–" if x is None else f"${x:.4f}" if x < 0.1 else f"${x:.3f}"


def main_table(summaries: Sequence[dict[str, Any]]) -> list[str]:
    head = "| System | Model | Accuracy % [95% CI] (judged/queries) | Unjudged | No-answers | Tool calls | $/query "
    head += "| gold_R % "
    head += "| cov_mean % |"
    lines = [head, "|---|---|---|---|---|---|---|---|---|"]
    for s in summaries:
        ci = s.get("accuracy_ci95")
        acc = _pct(s.get("accuracy")) + (f" [{_pct(ci[0])}, {_pct(ci[1])}]" if ci else "")
        acc += f" ({s.get('n_judged', 0)}/{s.get('n_queries', 0)})"
        system = system_name(s.get("system")) + (f" (K={s['k']})" if _varies(summaries, "k") else "")
        if _varies(summaries, "corpus"):
            system += f" · {s.get('corpus')}"
        if _varies(summaries, "repeat"):
            system += f" #{s.get('repeat')}"
        cells = [
            system,
            str(s.get("model")),
            acc,
            str(s.get("n_unjudged", 0)),
            f"{s.get('no_answers', 0)}/{s.get('n_queries', 0)}",
            _num((s.get("tool_calls") or {}).get("mean")),
            ("≥ " if s.get("cost_lower_bound") else "") + _usd(s.get("agent_usd_per_query")),  # calls were cut
            _pct(s.get("gold_R")),
            _pct(s.get("cov_mean")),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def detail_table(summaries: Sequence[dict[str, Any]]) -> list[str]:
    tools = sorted({t for s in summaries for t in s.get("tool_calls_by_tool", {})})
    head = ["Run", "Judged", "Calib. err %", "Model calls mean/median", "Tool calls median"]
    head += [f"{t} mean" for t in tools] + ["Workspace docs mean", "Judge $/query", "No-answers by stop reason"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, s in enumerate(summaries, 1):
        calls = s.get("model_calls") or {}
        by_tool = s.get("tool_calls_by_tool", {})
        reasons = ", ".join(f"{k} {v}" for k, v in s.get("no_answers_by_stop_reason", {}).items()) or "–"
        judged = f"{s.get('n_judged', 0)}/{s.get('n_queries', 0)}"
        if s.get("n_unjudged"):
            judged += f" ({s['n_unjudged']} unjudged)"
        cells = [
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
        lines.append("| " + " | ".join(cells) + " |")
    return lines


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


def retrievers_table(retrieval: Sequence[tuple[str, dict[str, Any]]]) -> list[str]:
    """Every retrieval result on one table, a row each with its retriever: retrievers side by side."""
    ks = sorted({k for _, r in retrieval for k in r.get("summary", {}).get("recall", {})}, key=int)
    lines = ["| Result | Retriever | Queries | " + " | ".join(f"recall@{k} %" for k in ks) + " |"]
    lines.append("|" + "---|" * (3 + len(ks)))
    for name, r in retrieval:
        s = r.get("summary", {})
        cells = [_pct(s.get("recall", {}).get(k)) for k in ks]
        lines.append(f"| {name} | {retriever_of(r)} | {s.get('n_queries', 0)} | " + " | ".join(cells) + " |")
    return lines


def unjudged_warnings(summaries: Sequence[dict[str, Any]]) -> list[str]:
    """A warning line per run with more than UNJUDGED_FLAG of its queries without a verdict."""
    lines = []
    for i, s in enumerate(summaries, 1):
        if s.get("too_many_unjudged"):
            n, judged = s.get("n_queries", 0), s.get("n_judged", 0)
            lines.append(
                f"**Warning:** run {i} ({system_name(s.get('system'))}): {n - judged} of {n} queries have no verdict "
                f"(more than {100 * UNJUDGED_FLAG:.0f}%); its accuracy is over the {judged} judged only. Run "
                "`judge` on it (queries without a gold answer cannot be judged)."
            )
    return lines + [""] if lines else []


def render_markdown(
    summaries: Sequence[dict[str, Any]],
    plots: Sequence[str],
    retrieval: Sequence[tuple[str, dict[str, Any]]] = (),
    paired: Sequence[dict[str, Any]] = (),
) -> str:
    out = ["# RISE evaluation report", ""]
    if summaries:
        n = sorted({s.get("n_queries", 0) for s in summaries})
        out += [f"{len(summaries)} run(s), {'/'.join(map(str, n))} queries each.", ""]
        out += unjudged_warnings(summaries)
        out += main_table(summaries)
        out += [
            "",
            "Accuracy: share of judged queries graded correct, with a Wilson 95% interval, and judged / queries. "
            "Unjudged: queries whose grader reply was not in the grader format even after a "
            "re-ask; they are left out of accuracy (re-run `judge` to grade them). No-answers: runs that ended "
            "without an answer (budget, clock, API error, context). "
            "Tool calls: mean per query. $/query: mean agent cost (the judge's is in the detail table). gold_R: "
            "share of gold documents inside the search union; cov_mean: share surfaced to the agent in reads, "
            "previews or shell output (means over queries with gold documents).",
            "",
            "Gold of gold_R and cov_mean: " + ", ".join(sorted({str(s.get("gold")) for s in summaries})) + ".",
            "",
            "## Details",
            "",
        ]
        out += detail_table(summaries)
        out += [
            "",
            f"Calibration error: RMS gap between stated confidence and accuracy over bins of {CALIBRATION_BIN} "
            "answers sorted by confidence (the remainder joins the last bin; fewer answers make one bin), "
            "summed over all bins, over queries that gave an answer.",
            "",
        ]
        for i, s in enumerate(summaries, 1):
            out.append(
                f"{i}. `{s.get('run_dir')}`"
                + (f" ({s['n_judged']} of {s['n_queries']} queries judged)" if s["n_judged"] < s["n_queries"] else "")
            )
        out.append("")
        if any(s.get("interaction") for s in summaries):
            out += ["## Interaction space", ""] + interaction_section(_numbered(summaries), summaries) + [""]
        labels = {s.get("run_dir"): label for s, label in zip(summaries, _numbered(summaries), strict=True)}
        for p in paired:
            out += ["## Paired comparison", ""] + paired_section(labels[p["a"]], labels[p["b"]], p) + [""]
    if retrieval:
        out += ["## Retrieval only", ""]
    if len(retrieval) > 1:
        out += retrievers_table(retrieval) + [""]
    for name, result in retrieval:
        out += retrieval_section(result, name) + [""]
    if plots:
        out += ["## Figures", ""] + [f"![{Path(p).stem}]({Path(p).name})" for p in plots] + [""]
    return "\n".join(out)


def _numbered(summaries: Sequence[dict[str, Any]]) -> list[str]:
    """'1. RISE / gpt-5.4-mini': the detail table's run number with the run's label."""
    return [f"{i}. {label}" for i, label in enumerate(run_labels(summaries), 1)]
