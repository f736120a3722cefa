"""`judge RUN_DIR`: grade every trajectory of a run, concurrently, through the project's rate-limited LLM client.

Resumable the same way the structure job is: a judgment is a file (judgments/<stem>.json, written atomically) and
a re-run skips every query that has one, so an interrupted judge never pays for a grade twice (`force` re-grades).
A failed call leaves no file, so the next run retries just those. Judge tokens and dollars are recorded per
judgment and never mixed into the agent's cost.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rise_batch.config import LLMConfig
from rise_batch.eval.judge import (
    GRADER_PROMPT,
    build_grader_messages,
    exact_match,
    is_empty_answer,
    judges,
    parse_grader_reply,
    response_text,
    trajectory_key,
)
from rise_batch.eval.queries import answers_by_id
from rise_batch.eval.rundir import judgment_path, load_run, write_json_atomic
from rise_batch.llm.limiter import Limiter
from rise_batch.prompts import load_prompt, prompt_hash

log = logging.getLogger(__name__)
_NO_USAGE = {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0}


@dataclass
class JudgeSummary:
    total: int = 0
    skipped_existing: int = 0
    exact: int = 0
    empty: int = 0
    llm: int = 0
    no_gold: int = 0  # nothing to compare with: no judgment written
    failed: int = 0  # LLM call failed for good: no judgment written, retried by the next run
    parse_errors: int = 0
    cost_usd: float = 0.0
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def offline_judgment(trajectory: dict[str, Any], golds: Sequence[str], judge_model: str) -> dict[str, Any] | None:
    """The judgment when no call is needed (empty answer, or exact match with a gold answer), else None."""
    base = {
        "query_id": trajectory.get("query_id"),
        "judge_model": judge_model,
        "parse_error": None,
        "usage": dict(_NO_USAGE),
        "cost_usd": 0.0,
        "gold_answers": list(golds),
    }
    if is_empty_answer(trajectory):
        reason = f"no answer (stop reason {trajectory.get('stop_reason')})"
        return base | {
            "correct": False,
            "extracted_final_answer": None,
            "reasoning": reason,
            "confidence": None,
            "method": "empty",
        }
    answer = trajectory.get("exact_answer")
    if exact_match(answer, golds):
        return base | {
            "correct": True,
            "extracted_final_answer": answer,
            "reasoning": "the normalised exact answer equals a gold answer",
            "confidence": trajectory.get("confidence"),
            "method": "exact",
        }
    return None


def llm_judgment(trajectory: dict[str, Any], golds: Sequence[str], reply: Any, prompt_id: str) -> dict[str, Any]:
    verdict = parse_grader_reply(reply.text)
    return {
        "query_id": trajectory.get("query_id"),
        "correct": verdict.correct,
        "extracted_final_answer": verdict.extracted_final_answer,
        "reasoning": verdict.reasoning,
        "confidence": verdict.confidence,
        "judge_model": reply.model,
        "method": "llm",
        "parse_error": verdict.parse_error,
        "missing_fields": list(verdict.missing),
        "usage": {
            "input_tokens": reply.input_tokens,
            "cached_input_tokens": reply.cached_input_tokens,
            "output_tokens": reply.output_tokens,
        },
        "cost_usd": reply.cost_usd,
        "gold_answers": list(golds),
        "prompt_hash": prompt_id,
        "grader_reply": reply.text,
    }


def gold_answers(trajectory: dict[str, Any], from_file: dict[str, tuple[str, ...]]) -> list[str]:
    golds = list(from_file.get(str(trajectory.get("query_id")), ()))
    own = trajectory.get("answer")
    if isinstance(own, str) and own.strip() and own not in golds:
        golds.insert(0, own)
    return golds


async def judge_run(
    run_dir: str | Path,
    llm: LLMConfig,
    *,
    force: bool = False,
    limiter: Limiter | None = None,
    prompt: str = GRADER_PROMPT,
    queries_path: str | Path | None = None,
    on_judged: Callable[[dict[str, Any]], None] | None = None,
) -> JudgeSummary:
    """Grade every trajectory of `run_dir` that has no judgment yet (all of them with `force`)."""
    from rise_batch.llm.client import LLMError, client_from_config

    run = load_run(run_dir)
    prompt_text = load_prompt(prompt)
    prompt_id = prompt_hash(prompt_text)
    from_file = answers_by_id(queries_path or run.meta.get("queries"))
    summary = JudgeSummary(total=len(run.trajectories))
    todo: list[tuple[str, dict[str, Any], list[str]]] = []
    for stem, traj in run.trajectories.items():
        if stem in run.judgments and not force and judges(run.judgments[stem], traj):
            summary.skipped_existing += 1
            continue
        golds = gold_answers(traj, from_file)
        if not golds:
            summary.no_gold += 1
            continue
        done = offline_judgment(traj, golds, llm.model)
        if done is not None:
            setattr(summary, done["method"], getattr(summary, done["method"]) + 1)
            _store(run.path, stem, done, traj, on_judged)
        else:
            todo.append((stem, traj, golds))
    if not todo:
        return summary
    queue: asyncio.Queue[tuple[str, dict[str, Any], list[str]]] = asyncio.Queue()
    for item in todo:
        queue.put_nowait(item)

    async with client_from_config(llm, limiter=limiter) as client:

        async def worker() -> None:
            while not queue.empty():
                stem, traj, golds = queue.get_nowait()
                messages = build_grader_messages(prompt_text, traj.get("query") or "", response_text(traj), golds)
                try:
                    reply = await client.chat(messages)
                except LLMError as e:
                    summary.failed += 1
                    summary.errors.append(f"{traj.get('query_id')}: {e}")
                    log.warning("judge: %s failed: %s", traj.get("query_id"), e)
                    continue
                judgment = llm_judgment(traj, golds, reply, prompt_id)
                summary.llm += 1
                summary.cost_usd += reply.cost_usd
                summary.parse_errors += judgment["parse_error"] is not None
                _store(run.path, stem, judgment, traj, on_judged)

        await asyncio.gather(*(worker() for _ in range(min(llm.concurrency, len(todo)))))
    return summary


def _store(
    run_dir: Path,
    stem: str,
    judgment: dict[str, Any],
    trajectory: dict[str, Any],
    on_judged: Callable[[dict[str, Any]], None] | None,
) -> None:
    judgment["trajectory_key"] = trajectory_key(trajectory)
    write_json_atomic(judgment_path(run_dir, stem), judgment)
    if on_judged is not None:
        on_judged(judgment)


def judge_run_sync(run_dir: str | Path, llm: LLMConfig, **options: Any) -> JudgeSummary:
    return asyncio.run(judge_run(run_dir, llm, **options))
