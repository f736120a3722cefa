"""`judge --mode batch`: the grader calls of a run through the OpenAI Batch API (half price, no rate limits).

Grading is never urgent, so a 24-hour batch at half price is usually the better deal. The resumable machinery is
the project's BatchRunner (manifest in RUN_DIR/judge_batches/): the group name is derived from exactly the set of
requests, so a driver killed while waiting asks for the same group again and adopts the batch it had created
instead of paying twice; once results are in, every answered line becomes a judgment file, and the failed ones
are left for the next run (a different set, hence a new group with only them). A reply that is not in the grader
format is re-asked once online (at the online price; a second day-long batch for a handful of re-asks is not worth
the wait), then recorded as a verdict or as `unjudged`, exactly as in online mode. Lines carry the grader's JSON
schema while structured outputs are on; lines a provider refused for it are graded online without it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rise_batch.config import LLMConfig
from rise_batch.eval.judge import GRADER_PROMPT, GRADER_RESPONSE_FORMAT
from rise_batch.eval.judge_runner import (
    JudgeSummary,
    grade_online,
    grade_reply,
    judge_budget,
    plan_judging,
    record_failure,
)
from rise_batch.llm.batch import reply_from_body
from rise_batch.llm.batch_runner import BatchRunner, async_client
from rise_batch.llm.cost_cap import CostCap
from rise_batch.llm.errors import refuses_response_format
from rise_batch.llm.pricing import PriceTable
from rise_batch.llm.spend import BudgetExceeded, worst_case_usd
from rise_batch.llm.tokens import counter_for

BATCH_DIR = "judge_batches"


def group_name(model: str, prompt_id: str, stems: list[str]) -> str:
    digest = hashlib.sha256("\0".join([model, prompt_id, *sorted(stems)]).encode()).hexdigest()[:16]
    return f"judge-{digest}"


async def judge_run_batch(
    run_dir: str | Path,
    llm: LLMConfig,
    *,
    force: bool = False,
    prompt: str = GRADER_PROMPT,
    queries_path: str | Path | None = None,
    poll_s: float = 30.0,
    completion_window: str = "24h",
    on_judged: Callable[[dict[str, Any]], None] | None = None,
    cap: CostCap | None = None,
) -> JudgeSummary:
    """Under a `cap` (--max-cost) the batch holds only the requests whose worst cases (at the batch price) fit in
    what is left, in order; the others are left for a later run (`left_by_budget`), and re-asks reserve online."""
    # lazy: loads openai, aiohttp, tenacity (~4 s)
    from rise_batch.llm.client import chat_request, client_from_config, format_params

    plan = plan_judging(run_dir, llm.model, force=force, prompt=prompt, queries_path=queries_path, on_judged=on_judged)
    if not plan.todo:
        return plan.summary
    prices = PriceTable.load([llm.prices_file] if llm.prices_file else [])
    client = async_client(llm.base_url, llm.api_key(), max(llm.timeout_s, 600.0))
    try:
        runner = BatchRunner(
            client,
            plan.run_dir / BATCH_DIR,
            poll_s=poll_s,
            completion_window=completion_window,
            metadata={"rise_batch_judge": plan.run_dir.name},
        )
        tasks = {t.stem: t for t in plan.todo}
        fmt = format_params(llm, GRADER_RESPONSE_FORMAT)
        requests = [(stem, chat_request(llm, t.messages, **fmt)) for stem, t in tasks.items()]
        budget = judge_budget(cap)
        held = fit_budget(budget, requests, llm, prices) if budget is not None else {}
        if budget is not None:
            plan.summary.left_by_budget = len(requests) - len(held)
            requests = [(stem, r) for stem, r in requests if stem in held]
            tasks = {stem: tasks[stem] for stem, _ in requests}
        group = group_name(llm.model, plan.prompt_id, list(tasks))
        results = await runner.run(group, requests) if requests else {}
    finally:
        await client.close()
    # re-asks (and refusals) online, reserving from the same budget
    async with client_from_config(
        llm, response_format=GRADER_RESPONSE_FORMAT, budget=budget, out=plan.run_dir
    ) as online:
        for stem, task in tasks.items():
            result = results.get(stem)
            if result is not None and refuses_response_format(result.status_code, result.error_message):
                online.response_format = None  # the provider has no structured outputs: grade this one online
                plan.summary.structured_output_disabled = 1
                await grade_online(plan, task, online.chat, on_judged)
                continue
            if result is None or not result.ok or result.body is None:
                record_failure(plan, task, result.describe() if result else "no result line")
                continue
            try:
                reply = reply_from_body(result.body, prices, llm.model, batch=True)._replace(constrained=bool(fmt))
            except ValueError as e:
                record_failure(plan, task, str(e))
                continue
            if budget is not None:
                budget.settle(held.pop(stem), reply.cost_usd)
            await grade_reply(plan, task, reply, online.chat, on_judged)
    return plan.summary


def fit_budget(budget: Any, requests: list[tuple[str, dict[str, Any]]], llm: LLMConfig, prices: PriceTable) -> dict:
    """Reserve each request's worst case at the batch price, in order, until one does not fit: {stem: reserved}."""
    counter, held = counter_for(llm.model), {}
    for stem, request in requests:
        worst = worst_case_usd(prices, llm.model, counter.request(request), llm.max_output_tokens, batch=True)
        try:
            budget.reserve(worst)
        except BudgetExceeded:
            break
        held[stem] = worst
    return held
