"""The trajectory stage: what one worker does with a query, and what the driver does with each outcome.

`QueryWorker` is built by the executor from its path (`rise_batch.agent.stage:QueryWorker`), in this process for
`workers: 0` or once in each Ray actor: it holds the LLM client, the document store and the index, and runs several
trajectories at once (`run_query`), each in its own workspace and with its own worker-side deadline.
`TrajectoryOutcomes` is the driver's side: progress, the driver's lines in events.jsonl, and a trajectory file for a
query that never came back (cancelled or killed by the watchdog, its worker dead `max_attempts` times, a worker bug),
so one poison query cannot stall a sweep and every query ends with a file.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Mapping
from typing import Any

from rise_batch.agent.run_config import RunConfig
from rise_batch.agent.run_stats import WorkerReport
from rise_batch.agent.runner import (
    EVENTS,
    EventLog,
    WorkerContext,
    failed_record,
    finished,
    run_query,
    safe_name,
    summary_of,
    trajectory_path,
)
from rise_batch.heap import keep_heap_small
from rise_batch.io import read_json, write_json_atomic
from rise_batch.llm.cost_cap import CostCap, join_services, worker_budget
from rise_batch.queries import Query
from rise_batch.storage import location

STUCK_WHY = "stuck past its trajectories' wall-clock budget"


class QueryWorker:
    """config: {"cfg": RunConfig, "config_hash"}; services: {"limiter": actor name} on Ray (the job's limiter),
    {"budget": ...} under --max-cost (llm/cost_cap.py)."""

    def __init__(self, config: Mapping[str, Any], services: Mapping[str, Any]) -> None:
        keep_heap_small()  # before the tool threads allocate: what a search frees goes back to the kernel
        cfg: RunConfig = config["cfg"]
        limiter = None
        if services.get("limiter"):
            from rise_batch.llm.limiter_actor import RemoteLimiter  # lazy: loads ray (Ray runs only)

            limiter = RemoteLimiter(services["limiter"], cfg.llm.concurrency)
        budget = worker_budget(services)
        self.ctx = WorkerContext(cfg, config["config_hash"], limiter, node=services.get("node"), budget=budget)

    async def warm_up(self) -> None:
        """Load the index before the first trajectory starts its clock (DCI never loads it)."""
        if self.ctx.system.uses_index:
            await asyncio.get_running_loop().run_in_executor(self.ctx.executor, self.ctx.index)

    async def run(self, query: Query, attempt: int) -> dict[str, Any]:
        return await run_query(self.ctx, query, attempt)

    async def close(self) -> WorkerReport:
        """This worker's transport counters, after its client is closed, and what its node's copies of the inputs
        cost it (WorkerContext.report)."""
        await self.ctx.aclose()
        return WorkerReport(self.ctx.client.stats.as_dict(), self.ctx.report())


class TrajectoryOutcomes:
    """The driver's hooks for one run: `progress` is the job's Progress (started / stopped / finished)."""

    def __init__(self, cfg: RunConfig, config_hash: str, progress: Any, cap: CostCap | None = None) -> None:
        self.cfg, self.config_hash, self.progress, self.cap = cfg, config_hash, progress, cap
        self._events: EventLog | None = None

    @property
    def events(self) -> EventLog:
        if self._events is None:
            self._events = EventLog(location(self.cfg.out) / EVENTS)
        return self._events

    def services(self, kind: str) -> tuple[dict[str, Any], Any]:
        """On Ray, the job's limiter actor, shared by every worker and held until every trajectory is done; under
        --max-cost, the budget every model call reserves from (one for all workers)."""
        budget = self.cap.services(kind) if self.cap is not None else ({}, None)
        if kind == "local":
            return budget
        from rise_batch.llm.limiter_actor import start_limiter  # lazy: loads ray (Ray runs only)

        name, handle = start_limiter(self.cfg.llm, self.config_hash)
        return join_services(({"limiter": name}, handle), budget)

    def describe(self, query: Query) -> str:
        return query.query_id

    def on_start(self, query: Query) -> None:
        self.progress.started()

    def on_stop(self, query: Query) -> None:
        self.progress.stopped()

    def on_result(self, query: Query, summary: dict[str, Any]) -> None:
        self.progress.finished(summary)

    def finished(self, query: Query) -> dict[str, Any] | None:
        """Before a resubmission: the summary of a trajectory its worker wrote just before dying, if any."""
        if not finished(self.cfg.out, query.query_id, self.config_hash):
            return None
        return summary_of(read_json(trajectory_path(self.cfg.out, query.query_id)))

    def on_event(self, event: str, query: Query | None, fields: dict[str, Any]) -> None:
        self.events.write({"event": event} | ({"query_id": query.query_id} if query is not None else {}) | fields)

    def on_lost(self, query: Query, lost: Any) -> None:
        """A query that never came back is recorded as failed (unless its worker wrote its file after all)."""
        retryable = False
        if lost.kind == "cancelled":
            reason, error = "wall_clock", "cancelled by the watchdog"
        elif lost.kind == "stuck":
            reason, error = "wall_clock", "the worker did not stop at the wall-clock budget; the watchdog killed it"
        elif lost.kind == "died":  # a lost node, an OOM kill: not the query's answer, so a resume runs it again
            reason, retryable = "api_error", True
            error = f"its worker process died {lost.deaths} times while running it; last: {lost.why}"
        else:  # run_query records harness errors itself: a task error is a bug
            reason, error = "api_error", f"worker task failed: {lost.error}"
        self._record_if_missing(query, reason, error, lost.elapsed, retryable)
        if lost.kind == "stuck":
            shutil.rmtree(self.cfg.workspace_dir / safe_name(query.query_id), ignore_errors=True)

    def _record_if_missing(self, query: Query, reason: str, error: str, elapsed: float, retryable: bool) -> None:
        """Count a query as done, writing its trajectory file unless its worker already did."""
        path = trajectory_path(self.cfg.out, query.query_id)
        if not finished(self.cfg.out, query.query_id, self.config_hash):
            record = failed_record(self.config_hash, self.cfg, query, reason, error, elapsed, retryable)
            write_json_atomic(path, record)
            self.events.write({"event": "driver_record", "query_id": query.query_id, "stop_reason": reason})
        self.progress.finished(summary_of(read_json(path)))

    def close(self) -> None:
        if self._events is not None:
            self._events.close()
