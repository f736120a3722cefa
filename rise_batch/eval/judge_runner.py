"""`judge RUN_DIR`: grade every trajectory of a run, concurrently, through the project's rate-limited LLM client.

Resumable the same way the structure job is: a judgment is a file (judgments/<stem>.json, written atomically) and
a re-run skips every query that has one, so an interrupted judge never pays for a grade twice (`force` re-grades).
A failed call leaves no file, so the next run retries just those. Judge tokens and dollars are recorded per
judgment and never mixed into the agent's cost.

A verdict comes only from a reply in the grader format (eval/judge.py parses it strictly). A reply that is not one
is re-asked once (the conversation plus what was wrong); when the re-ask fails too, the query is written as
`unjudged` with the reason and both replies: no verdict is invented, accuracy leaves it out, the summary and the
report count it apart, and the next run grades it again.

`--max-cost` caps the judging's total (every judgment file's `cost_usd`, over all the run directories judged
together, plus this pass): each call reserves its worst case before it is sent (llm/spend.py), and once one would
not fit no new judgment starts; a judgment whose re-ask is refused keeps its paid reply as `unjudged`.

With structured outputs on (the default; `llm.structured_output`) every grader request carries the grader's strict
JSON schema (eval/judge.GRADER_RESPONSE_FORMAT) and the judgment records `schema_constrained`; a server that refuses
the schema is asked again without it (llm/client.py), and the summary counts the switch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from rise_batch.config import LLMConfig
from rise_batch.eval.judge import (
    GRADER_PROMPT,
    GRADER_RESPONSE_FORMAT,
    build_grader_messages,
    check_grader_prompt,
    exact_match,
    is_empty_answer,
    is_unjudged,
    judges,
    parse_grader_reply,
    reask_messages,
    response_text,
    trajectory_key,
)
from rise_batch.eval.rundir import judgment_path, load_run
from rise_batch.io import write_json_atomic
from rise_batch.llm.cost_cap import CostCap, worker_budget
from rise_batch.llm.errors import LLMError
from rise_batch.llm.limiter import Limiter
from rise_batch.llm.spend import BudgetExceeded, CostBudget
from rise_batch.money.journal import spend_what
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
    parse_errors: int = 0  # grader replies that were not in the grader format (each one re-asked once)
    reasks: int = 0
    unjudged: int = 0  # the re-ask did not give a grader reply either: written as unjudged, no verdict
    structured_output_disabled: int = 0  # 1 when the server refused the grader schema and grading went on without
    left_by_budget: int = 0  # --max-cost: queries not graded (no file) because the next call would pass the limit
    cost_usd: float = 0.0
    replayed_usd: float = 0.0  # of cost_usd: replies kept from an earlier run (paid then, not by this pass)
    errors: list[str] = field(default_factory=list)
    # over every judgment of the run after this pass (set by eval.judging): unjudged ones are left out
    n_judged: int = 0
    accuracy: float | None = None
    accuracy_ci95: tuple[float, float] | None = None
    unjudged_total: int = 0

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


def llm_judgment(
    trajectory: dict[str, Any], golds: Sequence[str], replies: Sequence[Any], prompt_id: str, reask_error: str = ""
) -> dict[str, Any]:
    """The judgment from the grader's replies (the first, and the re-ask when there was one): the verdict of the
    last reply, or `unjudged` with the reason when it is not a grader reply. Usage and cost add up all replies."""
    last = replies[-1] if replies else None
    verdict = parse_grader_reply(last.text) if last is not None else None
    reasons = [parse_grader_reply(r.text).parse_error for r in replies]
    reasons = [r for r in reasons if r] + ([f"re-ask failed: {reask_error}"] if reask_error else [])
    judgment: dict[str, Any] = {
        "query_id": trajectory.get("query_id"),
        "correct": None if verdict is None else verdict.correct,
        "extracted_final_answer": None if verdict is None else verdict.extracted_final_answer,
        "reasoning": "" if verdict is None else verdict.reasoning,
        "confidence": None if verdict is None else verdict.confidence,
        "judge_model": last.model if last is not None else None,
        "method": "llm",
        "parse_error": None if verdict is None or verdict.correct is not None else verdict.parse_error,
        "missing_fields": [] if verdict is None else list(verdict.missing),
        "reasks": len(replies) - 1 + bool(reask_error),
        "usage": {k: sum(getattr(r, k) for r in replies) for k in _NO_USAGE},
        "cost_usd": sum(r.cost_usd for r in replies),
        "replayed_usd": sum(r.cost_usd for r in replies if getattr(r, "replayed", False)),  # of cost_usd: paid before
        "gold_answers": list(golds),
        "prompt_hash": prompt_id,
        "grader_reply": last.text if last is not None else None,
        "schema_constrained": bool(getattr(last, "constrained", False)),  # the verdict's reply was held to the schema
    }
    if len(replies) > 1:
        judgment["grader_replies"] = [r.text for r in replies]
    if verdict is None or verdict.correct is None:
        tries = "the re-ask" if len(replies) > 1 else "the reply"
        judgment |= {
            "correct": None,
            "unjudged": True,
            "parse_error": judgment["parse_error"] or reasons[-1],
            "unjudged_reason": f"no grader-format reply after {tries}: " + " | then: ".join(reasons),
        }
    return judgment


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
    earlier_usd: float = 0.0  # what the judgment this one replaces (unjudged, or --force) paid: kept recorded


def judgment_spend(judgment: dict[str, Any] | None) -> float:
    """What a judgment file records as paid: its own calls and those of the judgments it replaced."""
    if not isinstance(judgment, dict):
        return 0.0
    return float(judgment.get("cost_usd") or 0.0) + float(judgment.get("earlier_cost_usd") or 0.0)


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
    check_grader_prompt(prompt_text, prompt)
    from_file = answers_by_id(queries_path or run.meta.get("queries"))
    summary = JudgeSummary(total=len(run.trajectories))
    todo: list[JudgeTask] = []
    for stem, traj in run.trajectories.items():
        done_before = run.judgments.get(stem)
        if done_before is not None and not force and judges(done_before, traj) and not is_unjudged(done_before):
            summary.skipped_existing += 1
            continue
        golds = gold_answers(traj, from_file)
        if not golds:
            summary.no_gold += 1
            continue
        earlier = judgment_spend(done_before)
        done = offline_judgment(traj, golds, model)
        if done is not None:
            if earlier:
                done["earlier_cost_usd"] = round(earlier, 8)
            setattr(summary, done["method"], getattr(summary, done["method"]) + 1)
            _store(run.path, stem, done, traj, on_judged)
        else:
            messages = build_grader_messages(prompt_text, traj.get("query") or "", response_text(traj), golds)
            todo.append(JudgeTask(stem, traj, golds, messages, earlier))
    return JudgePlan(run.path, prompt_hash(prompt_text), summary, todo)


async def grade_reply(
    plan: JudgePlan,
    task: JudgeTask,
    reply: Any,
    ask: Callable[[list[dict[str, str]]], Awaitable[Any]],
    on_judged: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Turn the first grader reply into the task's judgment file: re-ask once (through `ask`) when the reply is not
    in the grader format, then record the verdict or `unjudged`; counted in the plan's summary."""
    replies, reask_error = [reply], ""
    first = parse_grader_reply(reply.text)
    if first.parse_error is not None:
        plan.summary.parse_errors += 1
        plan.summary.reasks += 1
        try:
            replies.append(await ask(reask_messages(task.messages, reply.text, first.parse_error)))
        except LLMError as e:
            reask_error = str(e)
        except BudgetExceeded:  # the paid first reply is kept (unjudged: the next run grades it again)
            reask_error = "the re-ask was not sent: it would pass --max-cost"
        else:
            plan.summary.parse_errors += parse_grader_reply(replies[-1].text).parse_error is not None
    judgment = llm_judgment(task.trajectory, task.golds, replies, plan.prompt_id, reask_error)
    if task.earlier_usd:
        judgment["earlier_cost_usd"] = round(task.earlier_usd, 8)
    plan.summary.llm += 1
    plan.summary.cost_usd += judgment["cost_usd"]
    plan.summary.replayed_usd += judgment["replayed_usd"]
    if judgment.get("unjudged"):
        plan.summary.unjudged += 1
        forget = getattr(getattr(ask, "__self__", None), "forget", None)  # `ask`: an LLMClient's chat
        if forget is not None:  # graded again by the next run, which buys fresh replies (money/replies.py)
            forget(task.messages)
            if len(replies) > 1:
                forget(reask_messages(task.messages, reply.text, first.parse_error))
        plan.summary.errors.append(f"{task.trajectory.get('query_id')}: unjudged: {judgment['unjudged_reason']}")
        log.warning("judge: %s unjudged: %s", task.trajectory.get("query_id"), judgment["unjudged_reason"])
    _store(plan.run_dir, task.stem, judgment, task.trajectory, on_judged)
    return judgment


async def grade_online(
    plan: JudgePlan,
    task: JudgeTask,
    ask: Callable[[list[dict[str, str]]], Awaitable[Any]],
    on_judged: Callable[[dict[str, Any]], None] | None = None,
) -> None:
    """Ask the grader online and record the judgment, or the failure (no file: the next run retries it)."""
    spend_what.set(f"judgment:{task.stem}")  # the journal's entries of this judgment's calls (money/spent.py)
    try:
        reply = await ask(task.messages)
    except LLMError as e:
        record_failure(plan, task, str(e))
        return
    await grade_reply(plan, task, reply, ask, on_judged)


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
    cap: CostCap | None = None,
) -> JudgeSummary:
    """Grade every trajectory of `run_dir` that has no judgment yet (all of them with `force`), online. Under a
    `cap` (--max-cost) each call reserves its worst case first; once one is refused no new judgment starts, those
    left are counted in `left_by_budget` (no file: the next run grades them)."""
    from rise_batch.llm.client import client_from_config  # lazy: loads openai, aiohttp, tenacity (~4 s)

    plan = plan_judging(run_dir, llm.model, force=force, prompt=prompt, queries_path=queries_path, on_judged=on_judged)
    if not plan.todo:
        return plan.summary
    queue: asyncio.Queue[JudgeTask] = asyncio.Queue()
    for task in plan.todo:
        queue.put_nowait(task)

    budget = judge_budget(cap)
    if getattr(budget, "tripped", None) is not None:  # the records already reach the limit: nothing is sent
        plan.summary.left_by_budget = len(plan.todo)
        return plan.summary
    client = client_from_config(
        llm, limiter=limiter, response_format=GRADER_RESPONSE_FORMAT, budget=budget, out=plan.run_dir
    )
    async with client:

        async def worker() -> None:
            while not queue.empty() and getattr(budget, "tripped", None) is None:
                try:
                    await grade_online(plan, queue.get_nowait(), client.chat, on_judged)
                except BudgetExceeded:
                    plan.summary.left_by_budget += 1
                    return

        await asyncio.gather(*(worker() for _ in range(min(llm.concurrency, len(plan.todo)))))
        plan.summary.left_by_budget += queue.qsize()
        plan.summary.structured_output_disabled = client.stats.structured_output_disabled
    return plan.summary


def judge_budget(cap: CostCap | None) -> CostBudget | None:
    """The budget a judging's calls reserve from (None without a limit); tripped already when what the judgment
    files record leaves nothing to spend."""
    if cap is None:
        return None
    try:
        return worker_budget(cap.services("local")[0])  # a sweep's cap hands its shared budget (HeldCap)
    except BudgetExceeded as e:
        budget = CostBudget(cap.limit, e.spent)
        budget.tripped = e
        return budget


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
