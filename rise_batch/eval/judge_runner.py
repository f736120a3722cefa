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
from typing import Any, NamedTuple

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
from rise_batch.eval.rundir import judgment_path, load_run
from rise_batch.io import write_json_atomic
from rise_batch.llm.limiter import Limiter
from rise_batch.prompts import load_prompt, prompt_hash
from rise_batch.queries import answers_by_id

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


class JudgeTask(NamedTuple):
    stem: str
    trajectory: dict[str, Any]
    golds: list[str]
    messages: list[dict[str, str]]


class JudgePlan(NamedTuple):
    run_dir: Path
    prompt_id: str
    summary: JudgeSummary
    todo: list[JudgeTask]  # what needs a model call


def plan_judging(
    run_dir: str | Path,
    model: str,
    *,
    force: bool = False,
    prompt: str = GRADER_PROMPT,
    queries_path: str | Path | None = None,
    on_judged: Callable[[dict[str, Any]], None] | None = None,
) -> JudgePlan:
    """Write the judgments that need no call (empty answers, exact matches) and list those that do."""
    run = load_run(run_dir)
    prompt_text = load_prompt(prompt)
    from_file = answers_by_id(queries_path or run.meta.get("queries"))
    summary = JudgeSummary(total=len(run.trajectories))
    todo: list[JudgeTask] = []
    for stem, traj in run.trajectories.items():
        if stem in run.judgments and not force and judges(run.judgments[stem], traj):
            summary.skipped_existing += 1
            continue
        golds = gold_answers(traj, from_file)
        if not golds:
            summary.no_gold += 1
            continue
        done = offline_judgment(traj, golds, model)
        if done is not None:
            setattr(summary, done["method"], getattr(summary, done["method"]) + 1)
            _store(run.path, stem, done, traj, on_judged)
        else:
            messages = build_grader_messages(prompt_text, traj.get("query") or "", response_text(traj), golds)
            todo.append(JudgeTask(stem, traj, golds, messages))
    return JudgePlan(run.path, prompt_hash(prompt_text), summary, todo)


def record_reply(
    plan: JudgePlan, task: JudgeTask, reply: Any, on_judged: Callable[[dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """Parse one grader reply into the task's judgment file and count it."""
    judgment = llm_judgment(task.trajectory, task.golds, reply, plan.prompt_id)
    plan.summary.llm += 1
    plan.summary.cost_usd += reply.cost_usd
    plan.summary.parse_errors += judgment["parse_error"] is not None
    _store(plan.run_dir, task.stem, judgment, task.trajectory, on_judged)
    return judgment


def record_failure(plan: JudgePlan, task: JudgeTask, error: str) -> None:
    plan.summary.failed += 1
    plan.summary.errors.append(f"{task.trajectory.get('query_id')}: {error}")
    log.warning("judge: %s failed: %s", task.trajectory.get("query_id"), error)


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
    """Grade every trajectory of `run_dir` that has no judgment yet (all of them with `force`), online."""
    from rise_batch.llm.client import client_from_config
    from rise_batch.llm.errors import LLMError

    plan = plan_judging(run_dir, llm.model, force=force, prompt=prompt, queries_path=queries_path, on_judged=on_judged)
    if not plan.todo:
        return plan.summary
    queue: asyncio.Queue[JudgeTask] = asyncio.Queue()
    for task in plan.todo:
        queue.put_nowait(task)

    async with client_from_config(llm, limiter=limiter) as client:

        async def worker() -> None:
            while not queue.empty():
                task = queue.get_nowait()
                try:
                    reply = await client.chat(task.messages)
                except LLMError as e:
                    record_failure(plan, task, str(e))
                    continue
                record_reply(plan, task, reply, on_judged)

        await asyncio.gather(*(worker() for _ in range(min(llm.concurrency, len(plan.todo)))))
    return plan.summary


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
