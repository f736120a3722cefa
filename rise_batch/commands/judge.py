"""`rise-batch judge RUN_DIR...`: grade a run's answers with the BrowseComp-Plus-style grader (resumable)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rise_batch.eval.sweep import JudgeSpec
from rise_batch.option_paths import URI, path_argument
from rise_batch.options import Entry, Layout, Section, add_layout

if TYPE_CHECKING:
    from rise_batch.eval.judge_runner import JudgeSummary


# What `judge` offers of JudgeSpec (a sweep's `judge:` keys): flags take the field's default, as there is no config
# file; docs/agents.md's table is made from this too (rise_batch/commands/doc_options.py).
JUDGE_OPTIONS = Layout(
    JudgeSpec,
    (
        Section(
            None,
            (
                *(Entry("model", required=True), "base_url", "api_key_env", "concurrency", "rpm", "tpm"),
                *(Entry("timeout_s", dest="timeout"), "reasoning_effort", "max_output_tokens", "prompt"),
                *("structured_output", "mode", "poll_s", "max_cost_usd"),
            ),
        ),
    ),
    from_file=False,
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "judge",
        help="grade the answers of run directories with an LLM judge (exact matches and no-answers need no call)",
        description=(
            "For every trajectory of RUN_DIR without a judgment, write RUN_DIR/judgments/<query>.json: empty "
            "answers are wrong without a call, a normalised exact match with a gold answer is right without a "
            "call, the rest go to the grader prompt (prompts/judge_grader.txt) through the rate-limited client. "
            "A grader reply that is not in the grader format is re-asked once, then written as unjudged (no verdict: "
            "left out of accuracy, counted apart, graded again by the next run). Re-running skips judged queries "
            "(--force re-grades them). Judge cost is recorded apart from agent cost. Ends with each run's accuracy "
            "and its bootstrap 95% interval; exits 1 when a call failed or a query stayed unjudged."
        ),
    )
    path_argument(
        p, "run_dirs", path=URI, nargs="+", metavar="RUN_DIR", help="run directory written by `rise-batch run`"
    )
    groups = add_layout(p, JUDGE_OPTIONS)
    groups[None].add_argument("--force", action="store_true", help="re-grade queries that already have a judgment")
    path_argument(p, "--queries", path=URI, help="query file with gold answers (default: the run's own, from run.json)")
    p.add_argument("--json", action="store_true", help="print the summaries as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from rise_batch.commands.json_exit import json_on_every_exit
    from rise_batch.eval.judging import judge_run_sync
    from rise_batch.eval.sweep import JudgeSpec, judge_llm_config
    from rise_batch.llm.cost_cap import CostCap
    from rise_batch.llm.simulated import cost_label
    from rise_batch.llm.spend import CostLimitReached, require_cap_price
    from rise_batch.money.spent import judged_usd
    from rise_batch.progress import Progress

    llm = judge_llm_config(
        JudgeSpec(
            base_url=args.base_url,
            model=args.model,
            api_key_env=args.api_key_env,
            reasoning_effort=args.reasoning_effort,
            max_output_tokens=args.max_output_tokens,
            timeout_s=args.timeout,
            rpm=args.rpm,
            tpm=args.tpm,
            concurrency=args.concurrency,
            structured_output=args.structured_output,
        )
    )
    limit = args.max_cost_usd
    if limit is not None and limit <= 0:
        raise ValueError(f"--max-cost must be > 0, got {limit!r}")
    require_cap_price(llm.model, llm.prices_file, limit, llm.max_output_tokens)
    # one limit over every run directory judged together: what their spend journals record for judgments counts
    cap = CostCap(limit, lambda: judged_usd(args.run_dirs)) if limit is not None else None
    failed = unjudged = left = 0
    results = {}
    label = cost_label(llm.base_url)  # the fake server's costs are printed as simulated
    # the progress line: the judgments this invocation writes and their dollars, beside what the cap counted before
    shown = Progress("judge", unit="judgments", show_cost=True, spent_before=cap.recorded() if cap else 0.0, cap=limit)
    for run_dir in args.run_dirs:
        if left:  # the limit stopped the judging: later run directories are not started
            break
        with json_on_every_exit(args.json, lambda: dict(results), indent=2):  # the run directories judged so far
            s = judge_run_sync(
                run_dir,
                llm,
                mode=args.mode,
                poll_s=args.poll_s,
                force=args.force,
                prompt=args.prompt,
                queries_path=args.queries,
                cap=cap,
                # what this pass paid: replies kept from an earlier run are in the spend before it
                on_judged=lambda j: shown.update(
                    1, cost=float(j.get("cost_usd") or 0.0) - float(j.get("replayed_usd") or 0.0)
                ),
            )
        left += s.left_by_budget
        results[run_dir] = s.as_dict() | {"cost_simulated": bool(label)}
        failed += s.failed
        unjudged += s.unjudged_total
        print_summary(run_dir, s, label)
    shown.close()
    if args.json:
        print(json.dumps(results, indent=2))
    if failed:
        print(f"judge: {failed} call(s) failed; re-run the same command to retry them")
    if unjudged:
        print(
            f"judge: {unjudged} quer{'y' if unjudged == 1 else 'ies'} unjudged: the grader's replies were not in the "
            "grader format (see unjudged_reason in judgments/*.json); check --model/--base-url/--prompt and re-run "
            "to grade them"
        )
    if left:
        raise CostLimitReached(budget_line(cap, left, args.run_dirs))
    return 1 if failed or unjudged else 0


def print_summary(run_dir: str, s: JudgeSummary, label: str) -> None:
    """What one run directory's judging did: counts, its cost, errors and accuracy."""
    print(
        f"judge {run_dir}: {s.total} trajectories, {s.skipped_existing} already judged, exact {s.exact}, "
        f"llm {s.llm}, empty {s.empty}, no gold {s.no_gold}, failed {s.failed}, unjudged {s.unjudged}, "
        f"re-asks {s.reasks}, judge cost ${s.cost_usd:.4f}{label}"
        + (f", {s.left_by_budget} left by --max-cost" if s.left_by_budget else "")
    )
    if s.structured_output_disabled:
        print(f"judge {run_dir}: the server refused structured outputs; graded without the grader schema")
    for e in s.errors[:5]:
        print(f"  error: {e}")
    print(f"judge {run_dir}: {accuracy_line(s)}")


def budget_line(cap, left: int, run_dirs: list[str]) -> str:
    """The one line a judging stopped at --max-cost ends with: what the spend journals record, what is left."""
    return (
        f"stopped at the cost limit: the judging has spent ${cap.recorded():.4f} of --max-cost ${cap.limit:.4f} "
        f"(what the spend journals of {', '.join(run_dirs)} record for judging); {left} queries were not graded (no "
        "judgment written) and run directories after the one that reached the limit were not started. Re-run the "
        "same command with a higher --max-cost to continue: judged queries are skipped, and what a replaced "
        "judgment paid is kept as its earlier_cost_usd"
    )


def accuracy_line(s: JudgeSummary) -> str:
    """Accuracy as the report shows it: over judged queries (n judged / n queries), with its Wilson interval,
    unjudged ones beside it."""
    if s.accuracy is None:
        acc = "accuracy n/a (no judged query)"
    else:
        ci = f" [95% CI {100 * s.accuracy_ci95[0]:.1f}, {100 * s.accuracy_ci95[1]:.1f}]" if s.accuracy_ci95 else ""
        acc = f"accuracy {100 * s.accuracy:.1f}%{ci} over {s.n_judged}/{s.total} judged"
    return f"{acc}; {s.unjudged_total} unjudged (left out of accuracy)"
