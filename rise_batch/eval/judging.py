"""Judge a run in either mode: the one entry point the `judge` command and sweeps call.

It sits above both runners: `judge_runner` (plan, record, online calls) and `judge_batch` (the Batch API, built on
judge_runner's plan and record functions). Choosing the mode here, rather than in judge_runner, keeps the arrows
between the two runners one-way. Both end the same way: the run's accuracy over every judgment now on disk (with
its bootstrap interval, unjudged queries left out and counted apart) goes into the summary, so `judge` and sweeps
print the figure the report will show.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from rise_batch.config import LLMConfig
from rise_batch.dirlock import claim, holding
from rise_batch.errors import StorageError
from rise_batch.eval.judge import judges
from rise_batch.eval.judge_batch import judge_run_batch
from rise_batch.eval.judge_runner import JudgeSummary, judge_run
from rise_batch.eval.metrics import run_metrics
from rise_batch.eval.rundir import judgment_path, load_run
from rise_batch.storage import location


@holding("rise-batch judge")
def judge_run_sync(
    run_dir: str | Path, llm: LLMConfig, *, mode: str = "online", poll_s: float = 30.0, **options: Any
) -> JudgeSummary:
    """Judge a run online (rate-limited calls) or in batch mode (the Batch API: half price, no limiter). The run
    directory is locked as `run` locks it, so a judging and a run (or two judgings) never write it at once."""
    if location(run_dir).exists():  # a missing one is refused by the judge, naming it
        claim(run_dir)
    if mode == "batch":
        options.pop("limiter", None)
        summary = asyncio.run(judge_run_batch(run_dir, llm, poll_s=poll_s, **options))
    elif mode == "online":
        summary = asyncio.run(judge_run(run_dir, llm, **options))
    else:
        raise ValueError(f"judge mode must be 'online' or 'batch', got {mode!r}")
    return with_accuracy(summary, run_dir)


def with_accuracy(summary: JudgeSummary, run_dir: str | Path) -> JudgeSummary:
    """Fill the summary's run-wide figures from the judgments on disk (the report's own computation), once the
    judgments the summary counts are found there: one per trajectory, except those without a gold answer, those
    whose call failed and those --max-cost left (no file: the next run grades them)."""
    run = load_run(run_dir)
    judged = [s for s, t in run.trajectories.items() if s in run.judgments and judges(run.judgments[s], t)]
    if len(judged) < summary.total - summary.no_gold - summary.failed - summary.left_by_budget:
        gone = sorted(set(run.trajectories) - set(judged))
        raise StorageError(
            f"{judgment_path(run.path, '*').parent}: {len(gone)} of {len(run.trajectories)} trajectories have no "
            f"judgment, {summary.no_gold} without a gold answer and {summary.failed} failed calls explain only "
            f"{summary.no_gold + summary.failed} (missing among: {', '.join(gone[:5])}): the judgments are not "
            "where this process wrote them"
        )
    m = run_metrics(run.meta, run.trajectories, run.judgments)
    summary.n_judged, summary.unjudged_total = m["n_judged"], m["n_unjudged"]
    summary.accuracy, summary.accuracy_ci95 = m["accuracy"], m["accuracy_ci95"]
    return summary
