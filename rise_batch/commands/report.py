"""`rise-batch report RUN_DIR... --out DIR`: the paper-style table, report.json and figures; on stdout a short
summary (a line per run, the comparisons, the spend, where the files went), not report.md."""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import dataclass
from typing import Any

from rise_batch.option_paths import URI, path_argument
from rise_batch.options import Entry, Layout, Section, add_layout, option


@dataclass(frozen=True)
class ReportOptions:
    """`report`'s settings (its flags and docs/agents.md's table)."""

    out: str = option("", path=URI, help="output directory")
    retrieval: list[str] = option(
        default_factory=list, repeatable=True, metavar="JSON", path=URI, help="eval-retrieval results file (repeatable)"
    )
    qrels: str | None = option(
        None, path=URI, help="TREC qrels file (`qid iter docid rel`): gold_R and cov_mean against its relevant docs"
    )
    calibration_bin: int = option(100, help="answers per calibration bin")


REPORT_OPTIONS = Layout(
    ReportOptions,
    (Section(None, (Entry("out", required=True), "retrieval", "qrels", "calibration_bin")),),
    from_file=False,
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="summarise judged run directories into report.md, report.json and PNG figures",
        description=(
            "Reads each RUN_DIR (trajectories/ and judgments/ from `rise-batch run` and `rise-batch judge`) and "
            "writes DIR/report.md (system, model, accuracy with a bootstrap 95% interval, no-answers, tool calls, "
            "$/query, gold_R, cov_mean), DIR/report.json and PNGs: accuracy vs cost, tool calls, and for sweeps "
            "accuracy vs K and vs corpus size. --retrieval adds `eval-retrieval --out` results."
        ),
    )
    path_argument(p, "run_dirs", path=URI, nargs="*", metavar="RUN_DIR", help="run directories (judged)")
    add_layout(p, REPORT_OPTIONS)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rise_batch.eval.report import write_report
    from rise_batch.storage import location

    if not args.run_dirs and not args.retrieval:
        raise SystemExit("report: give at least one RUN_DIR or --retrieval results file")
    report = write_report(
        args.run_dirs, args.out, retrieval_files=args.retrieval, bin_size=args.calibration_bin, qrels=args.qrels
    )
    for line in summary_lines(report):
        print(line)
    out = location(args.out)
    print(f"report: wrote {out / 'report.md'}, {out / 'report.html'}, report.json and {len(report['plots'])} figure(s)")
    return 0


def summary_lines(report: dict[str, Any]) -> list[str]:
    """What the command prints (report.md holds the rest): a line per run (what it is, its accuracy, its cost),
    the comparisons made and what all the runs spent."""
    from rise_batch.eval.comparisons import factor_name, numbered_labels

    runs = report["runs"]
    lines = []
    for label, s in zip(numbered_labels(runs), runs, strict=True):
        acc, ci = s.get("accuracy"), s.get("accuracy_ci95")
        acc_text = (
            "–" if acc is None else f"{100 * acc:.1f}%" + (f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if ci else "")
        )
        spent = s.get("spent") or {}
        lines.append(
            f"{label}: accuracy {acc_text} ({s.get('n_judged', 0)}/{s.get('n_queries', 0)} judged), "
            f"agent $/query ${s.get('agent_usd_per_query') or 0:.4f}, spent ${spent.get('spent_usd', 0):.4f}"
        )
    if report["paired"]:
        kinds = Counter(factor_name(p["factor"]) for p in report["paired"])
        lines.append(
            f"paired comparisons: {len(report['paired'])} (" + ", ".join(f"{k} {n}" for k, n in kinds.items()) + ")"
        )
    if len(runs) > 1:
        total = report["spent"]
        lines.append(
            f"spent: ${total['spent_usd']:.4f} (agents ${total['agents_usd']:.4f}, judge ${total['judge_usd']:.4f})"
        )
    return lines
