"""Judge a run in either mode: the one entry point the `judge` command and sweeps call.

It sits above both runners: `judge_runner` (plan, record, online calls) and `judge_batch` (the Batch API, built on
judge_runner's plan and record functions). Choosing the mode here, rather than in judge_runner, keeps the arrows
between the two runners one-way.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from rise_batch.config import LLMConfig
from rise_batch.eval.judge_batch import judge_run_batch
from rise_batch.eval.judge_runner import JudgeSummary, judge_run


def judge_run_sync(
    run_dir: str | Path, llm: LLMConfig, *, mode: str = "online", poll_s: float = 30.0, **options: Any
) -> JudgeSummary:
    """Judge a run online (rate-limited calls) or in batch mode (the Batch API: half price, no limiter)."""
    if mode == "batch":
        options.pop("limiter", None)
        return asyncio.run(judge_run_batch(run_dir, llm, poll_s=poll_s, **options))
    if mode != "online":
        raise ValueError(f"judge mode must be 'online' or 'batch', got {mode!r}")
    return asyncio.run(judge_run(run_dir, llm, **options))
