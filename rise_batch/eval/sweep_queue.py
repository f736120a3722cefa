"""One queue for a whole sweep: the pending queries of every unfinished cell, over one pool of workers.

Run cell after cell, a sweep pays each cell's slow tail (a few trajectories near the wall-clock budget) with every
other actor idle. Here every cell is prepared as `rise-batch run` prepares a run (its run directory pinned, its
finished queries skipped: `agent.job.prepare_run`), then all their pending queries go into one map over one pool of
workers. A worker (`CellsWorker`) holds one `WorkerContext` per cell (client, document store, index), built when it
starts; the cells' trajectories interleave on it. The driver's hooks route each outcome to its cell's own
`TrajectoryOutcomes`, so each run directory gets exactly the files and events a run writes. When a cell's last query
is back, `on_cell` is called (in a driver thread of the caller's): the sweep judges it and records it in sweep.json
while the other cells' trajectories still run.

Rate limits are per model, not per cell: cells of one model share one limiter (a Ray actor, or one in-process
limiter for `workers: 0`), as they share the provider's limits. The watchdog's deadline is the longest budget among
the cells (each trajectory still stops at its own budget in its worker).

Under the sweep's --max-cost every model call of every cell reserves its worst case from one budget (a CostBudget
in process, a BudgetActor on Ray: llm/cost_cap.py), the one the sweep's judgings reserve from too; a refused call
ends its trajectory as `budget` (retryable, its spend kept) and stops the stage (BudgetExceeded in `stop_on`): no
new trajectory starts.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from rise_batch.agent.job import RunPlan, prepare_run
from rise_batch.agent.run_stats import WorkerReport
from rise_batch.agent.runner import WorkerContext, finished, run_query
from rise_batch.agent.stage import STUCK_WHY, TrajectoryOutcomes
from rise_batch.errors import StorageError
from rise_batch.executor import executor_for
from rise_batch.executor.base import MapOptions, Stage, WorkerSpec
from rise_batch.executor.probe import REMEDY
from rise_batch.llm.cost_cap import CostCap, join_services, worker_budget
from rise_batch.llm.errors import KeyRefused
from rise_batch.llm.limiter import AsyncLimiter
from rise_batch.llm.ratelimit import RateLimits
from rise_batch.llm.spend import BudgetExceeded
from rise_batch.queries import Query


class CellQuery(NamedTuple):
    """One item of the sweep's queue: a query of a cell."""

    cell: str
    query: Query


def limiter_key(llm: Any) -> str:
    """Cells whose calls share a provider's limits: same endpoint, model and limits."""
    basis = f"{llm.base_url}\0{llm.model}\0{llm.rpm}\0{llm.tpm}\0{llm.api_key_env}"
    return hashlib.sha256(basis.encode()).hexdigest()[:16]


class CellsWorker:
    """config: {"cells": {cell id: (RunConfig, config hash)}, "sweep": a key}; services: {"limiters": {cell id: actor
    name}} on Ray, {"budget": ...} under --max-cost (one for every cell). Builds every cell's context at start
    (warm_up), so no trajectory's clock pays an index load."""

    def __init__(self, config: Mapping[str, Any], services: Mapping[str, Any]) -> None:
        self.cells: dict[str, tuple[Any, str]] = dict(config["cells"])
        self.names: dict[str, str] = dict(services.get("limiters") or {})
        self.node = services.get("node")
        self.budget = worker_budget(dict(services))
        self.contexts: dict[str, WorkerContext] = {}
        self._shared: dict[str, Any] = {}  # in process: one limiter per limiter_key
        self._locks: dict[str, asyncio.Lock] = {}

    def _limiter(self, cid: str, cfg: Any) -> Any:
        if self.names.get(cid):
            from rise_batch.llm.limiter_actor import RemoteLimiter  # lazy: loads ray (Ray runs only)

            return RemoteLimiter(self.names[cid], cfg.llm.concurrency)
        key = limiter_key(cfg.llm)
        if key not in self._shared:
            limits = RateLimits(rpm=cfg.llm.rpm, tpm=cfg.llm.tpm, window_s=cfg.llm.limit_window_s)
            self._shared[key] = AsyncLimiter(limits, cfg.llm.concurrency)
        return self._shared[key]

    def _context(self, cid: str) -> WorkerContext:
        if cid not in self.contexts:
            cfg, ch = self.cells[cid]
            ctx = WorkerContext(cfg, ch, self._limiter(cid, cfg), node=self.node, budget=self.budget)
            if ctx.system.uses_index:
                ctx.index()
            self.contexts[cid] = ctx
        return self.contexts[cid]

    async def warm_up(self) -> None:
        loop = asyncio.get_running_loop()
        for cid in self.cells:
            await loop.run_in_executor(None, self._context, cid)

    async def run(self, item: CellQuery, attempt: int) -> dict[str, Any]:
        ctx = self.contexts.get(item.cell)
        if ctx is None:  # in process there is no warm-up: the cell's first items build it, one of them only
            async with self._locks.setdefault(item.cell, asyncio.Lock()):
                ctx = await asyncio.get_running_loop().run_in_executor(None, self._context, item.cell)
        return await run_query(ctx, item.query, attempt)

    async def close(self) -> dict[str, WorkerReport]:
        reports = {}
        for cid, ctx in self.contexts.items():
            await ctx.aclose()
            reports[cid] = WorkerReport(ctx.client.stats.as_dict(), ctx.report())
        return reports


@dataclass
class CellRun:
    """The driver's state of one cell in the queue."""

    cell: Any  # eval.sweep.Cell
    plan: RunPlan
    outcomes: TrajectoryOutcomes | None = None
    left: int = 0
    nodes: dict[str, str] = field(default_factory=dict)  # query id -> Ray node
    reports: list[WorkerReport] = field(default_factory=list)

    @property
    def cid(self) -> str:
        return self.cell.cell_id

    def missing(self) -> list[Query]:
        """Pending queries with no trajectory file the driver can read (written, retryable or not)."""
        p = self.plan
        return [q for q in p.pending if not finished(p.cfg.out, q.query_id, p.config_hash, True)]


def prepare_cells(cells: list[tuple[Any, Any]]) -> list[CellRun]:
    """Every cell's run directory pinned and its pending queries found, before any query runs."""
    return [CellRun(cell, prepare_run(run_cfg)) for cell, run_cfg in cells]


class _Routes:
    """The stage's hooks, each routed to the item's cell; `on_cell(run)` when a cell's last query is back."""

    def __init__(
        self, runs: list[CellRun], progress: Any, on_cell: Callable[[CellRun], None], cap: CostCap | None = None
    ) -> None:
        self.by_id = {r.cid: r for r in runs}
        self.on_cell, self.cap = on_cell, cap
        for r in runs:
            r.outcomes = TrajectoryOutcomes(r.plan.cfg, r.plan.config_hash, progress)

    def outcomes(self, item: CellQuery) -> TrajectoryOutcomes:
        out = self.by_id[item.cell].outcomes
        assert out is not None
        return out

    def done(self, item: CellQuery) -> None:
        run = self.by_id[item.cell]
        run.left -= 1
        if run.left == 0:
            self.on_cell(run)

    def on_result(self, item: CellQuery, summary: dict[str, Any]) -> None:
        self.outcomes(item).on_result(item.query, summary)
        self.done(item)

    def on_lost(self, item: CellQuery, lost: Any) -> None:
        self.outcomes(item).on_lost(item.query, lost)
        self.done(item)

    def on_event(self, event: str, item: CellQuery | None, fields: dict[str, Any]) -> None:
        runs = [self.by_id[item.cell]] if item is not None else list(self.by_id.values())
        for r in runs:  # an event of no item (a worker replaced) concerns every cell it served
            assert r.outcomes is not None
            r.outcomes.on_event(event, item.query if item is not None else None, fields)

    def services(self, kind: str) -> tuple[dict[str, Any], Any]:
        """On Ray, one limiter actor per limiter_key, held until every item is done; under --max-cost, the
        sweep's budget (the cap's, started by the sweep: HeldCap)."""
        budget = self.cap.services(kind) if self.cap is not None else ({}, None)
        if kind == "local":
            return budget
        from rise_batch.llm.limiter_actor import start_limiter  # lazy: loads ray (Ray runs only)

        names: dict[str, str] = {}
        started: dict[str, tuple[str, Any]] = {}
        salt = uuid.uuid4().hex[:8]  # this stage's own actors: never an earlier invocation's, reclaimed meanwhile
        for cid, r in self.by_id.items():
            key = limiter_key(r.plan.cfg.llm)
            if key not in started:
                started[key] = start_limiter(r.plan.cfg.llm, f"{key}-{salt}")
            names[cid] = started[key][0]
        return join_services(({"limiters": names}, [h for _, h in started.values()]), budget)

    def close(self) -> None:
        for r in self.by_id.values():
            if r.outcomes is not None:
                r.outcomes.close()


def map_options(runs: list[CellRun]) -> tuple[int, MapOptions, str | None]:
    """(workers, options, ray address) for the pool: the largest of the cells' settings (a sweep's `run:` keys are
    shared, so they are usually all the same)."""
    cfgs = [r.plan.cfg for r in runs]
    workers = max(c.workers for c in cfgs)
    concurrency = max(c.concurrency for c in cfgs)
    options = MapOptions(
        max_in_flight=concurrency,
        per_worker=max(1, math.ceil(concurrency / max(workers, 1))),
        spare_calls=4,
        max_attempts=max(c.max_attempts for c in cfgs),
        deadline_s=max(c.budget().wall_clock_s + c.grace_s for c in cfgs),
        kill_grace_s=max(c.kill_grace_s for c in cfgs),
        worker_cpus=cfgs[0].worker_cpus,
        close_timeout_s=5,
    )
    return workers, options, cfgs[0].ray_address


def run_queue(
    runs: list[CellRun],
    progress: Any,
    on_cell: Callable[[CellRun], None],
    env: tuple[str, ...] = (),
    cap: CostCap | None = None,
) -> None:
    """Every pending query of `runs` through one pool; `on_cell` for each cell once all its trajectories are in (at
    once for a cell with none pending). A query whose file the driver does not find runs once more; still missing,
    the sweep fails naming it (the driver verifies, as `run` does). `env`: variables lent to the actors. `cap`:
    the sweep's --max-cost; a refused call raises BudgetExceeded once the running trajectories have ended."""
    routes = _Routes(runs, progress, on_cell, cap)
    try:
        todo = {r.cid: r.plan.pending for r in runs}
        for attempt in (1, 2):
            active = [r for r in runs if todo[r.cid]]
            for r in runs:
                r.left = len(todo[r.cid])
                if attempt == 1 and not r.left:
                    on_cell(r)
            if not active:
                return
            items = [CellQuery(r.cid, q) for r in active for q in todo[r.cid]]
            _map(active, items, routes, progress, env)
            todo = {r.cid: r.missing() for r in runs}
            if attempt == 1 and any(todo.values()):
                first = next(r for r in runs if todo[r.cid])
                print(
                    f"eval_sweep: {sum(map(len, todo.values()))} trajectories the workers reported written are not "
                    f"in their cell's run directory (first: {first.cid}/{todo[first.cid][0].query_id}); running them "
                    "again",
                    flush=True,
                )
        first = next((r for r in runs if todo[r.cid]), None)
        if first is not None:
            q = todo[first.cid][0]
            node = first.nodes.get(q.query_id)
            raise StorageError(
                f"{first.plan.cfg.out}: the trajectory of {q.query_id} is missing, "
                f"{f'written by node {node}' if node else 'written in this process'}, still after it ran again: "
                f"the workers do not write the run directory this driver reads; {REMEDY}"
            )
    finally:
        routes.close()


def _map(active: list[CellRun], items: list[CellQuery], routes: _Routes, progress: Any, env: tuple[str, ...]) -> None:
    workers, options, address = map_options(active)
    cells = {r.cid: (r.plan.cfg, r.plan.config_hash) for r in active}
    by_id = routes.by_id
    stage = Stage(
        worker=WorkerSpec("rise_batch.eval.sweep_queue:CellsWorker", {"cells": cells}, "SweepWorker"),
        what="trajectory",
        describe=lambda item: f"{item.cell}/{item.query.query_id}",
        on_start=lambda item: progress.started(),
        on_stop=lambda item: progress.stopped(),
        on_result=routes.on_result,
        on_node=lambda item, node: by_id[item.cell].nodes.__setitem__(item.query.query_id, node),
        on_lost=routes.on_lost,
        on_event=routes.on_event,
        finished=lambda item: routes.outcomes(item).finished(item.query),
        services=routes.services,
        stop_on=(KeyRefused, BudgetExceeded),
        stuck_why=STUCK_WHY,
    )
    for report in executor_for(workers, options, address, env).map(stage, items):
        for cid, r in (report or {}).items():
            by_id[cid].reports.append(r)
