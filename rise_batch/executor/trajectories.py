"""Trajectories fanned across Ray actors: async workers, bounded work in flight, resubmission and a watchdog.

Each actor is an asyncio worker running several trajectories at once (`run_query`, the same function the
in-process path runs), each in its own workspace and with its own worker-side deadline. The driver keeps at most
`concurrency` queries in flight and watches every one of them: a trajectory still out at budget + grace is
cancelled (it then writes its own `wall_clock` file); if its actor does not answer the cancel within
`kill_grace_s` (a frozen process, a blocked event loop), the actor is killed and replaced, the stuck query gets a
`wall_clock` file from the driver, and the actor's other queries go back to the queue. A query whose actor dies
under it (crash, OOM kill) is resubmitted; after `max_attempts` deaths it is recorded as failed, so one poison
query cannot stall a sweep. All actors share the job's rate limiter actor.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from rise_batch.agent.job import Progress, RunPlan
from rise_batch.agent.run_config import run_config_from_dict
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
from rise_batch.config import config_to_dict
from rise_batch.io import read_json, write_json_atomic
from rise_batch.queries import Query

POLL_S = 0.2
MAX_INIT_FAILURES = 3
_DIED = (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError, ray.exceptions.ActorUnavailableError)


@ray.remote
class TrajectoryWorker:
    """Builds its LLM client, document store and index once, then runs trajectories concurrently on request."""

    def __init__(self, cfg: dict[str, Any], config_hash: str, limiter_name: str | None) -> None:
        self.cfg = run_config_from_dict(cfg)
        limiter = None
        if limiter_name:
            from rise_batch.llm.limiter_actor import RemoteLimiter

            limiter = RemoteLimiter(limiter_name, self.cfg.llm.concurrency)
        self.ctx = WorkerContext(self.cfg, config_hash, limiter)
        self.where = (os.getpid(), ray.get_runtime_context().get_node_id())

    async def ready(self) -> int:
        """Load the index before the first trajectory starts its clock; returns (pid, node id)."""
        import asyncio

        if self.ctx.system.uses_index:
            await asyncio.get_running_loop().run_in_executor(self.ctx.executor, self.ctx.index)
        return self.where

    async def run(self, query: Query, attempt: int) -> dict[str, Any]:
        return await run_query(self.ctx, query, attempt)

    def transport_stats(self) -> dict[str, Any]:
        return self.ctx.client.stats.as_dict()


@dataclass
class Flight:
    slot: int
    query: Query
    attempt: int
    started: float
    cancelled_at: float | None = None


@dataclass
class Slot:
    actor: Any
    ready_ref: Any
    pid: int | None = None
    node: str | None = None
    load: int = 0
    generation: int = 0


class Dispatcher:
    """The driver's bookkeeping: actors, queue, flights, deaths; one `step()` per poll."""

    def __init__(self, plan: RunPlan, progress: Progress, limiter_name: str | None) -> None:
        cfg = self.cfg = plan.cfg
        self.plan, self.progress = plan, progress
        self.n = max(cfg.workers, 1)
        self.per_actor = max(1, math.ceil(cfg.concurrency / self.n))
        self.cfg_dict = config_to_dict(cfg)
        self.limiter_name = limiter_name
        budget = cfg.budget()
        self.overdue_s = budget.wall_clock_s + cfg.grace_s
        self.queue: deque[tuple[Query, int]] = deque((q, 1) for q in plan.pending)
        self.flights: dict[Any, Flight] = {}
        self.deaths: dict[str, int] = {}
        self.init_failures = 0
        self.events = EventLog(Path(cfg.out) / EVENTS)
        self.slots = [self._spawn() for _ in range(self.n)]

    def _spawn(self) -> Slot:
        actor = TrajectoryWorker.options(max_concurrency=self.per_actor + 4, num_cpus=self.cfg.worker_cpus).remote(
            self.cfg_dict, self.plan.config_hash, self.limiter_name
        )
        return Slot(actor, actor.ready.remote())

    def _respawn(self, i: int, why: str, hard: bool = False) -> None:
        old = self.slots[i]
        self.events.write({"event": "worker_replaced", "slot": i, "pid": old.pid, "why": why})
        ray.kill(old.actor, no_restart=True)
        if hard and old.pid is not None and old.node == ray.get_runtime_context().get_node_id():
            try:  # ray.kill asks the worker to exit; a frozen process never answers, so make sure
                os.kill(old.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.slots[i] = self._spawn()
        self.slots[i].generation = old.generation + 1

    def done(self) -> bool:
        return not self.queue and not self.flights

    def step(self) -> None:
        self._submit()
        pending_ready = {s.ready_ref: i for i, s in enumerate(self.slots) if s.pid is None}
        refs = list(self.flights) + list(pending_ready)
        if refs:
            ready, _ = ray.wait(refs, num_returns=1, timeout=POLL_S)
            if ready:
                ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            for ref in ready:
                if ref in pending_ready:
                    self._on_ready(pending_ready[ref], ref)
                elif ref in self.flights:
                    self._on_result(ref)
        self._watchdog(time.monotonic())

    def _submit(self) -> None:
        """Fill the least loaded ready actors, keeping at most `concurrency` queries in flight in total."""
        while self.queue and len(self.flights) < self.cfg.concurrency:
            ready = [i for i, s in enumerate(self.slots) if s.pid is not None and s.load < self.per_actor]
            if not ready:
                return
            i = min(ready, key=lambda j: self.slots[j].load)
            query, attempt = self.queue.popleft()
            if attempt > 1 and finished(self.cfg.out, query.query_id, self.plan.config_hash):
                self.progress.finished(summary_of(read_json(trajectory_path(self.cfg.out, query.query_id))))
                continue  # its worker wrote it just before dying
            ref = self.slots[i].actor.run.remote(query, attempt)
            self.flights[ref] = Flight(i, query, attempt, time.monotonic())
            self.slots[i].load += 1
            self.progress.started()

    def _on_ready(self, i: int, ref: Any) -> None:
        try:
            self.slots[i].pid, self.slots[i].node = ray.get(ref)
        except _DIED + (ray.exceptions.RayTaskError,) as e:
            self.init_failures += 1
            if self.init_failures >= MAX_INIT_FAILURES:
                raise RuntimeError(f"trajectory workers fail to start ({self.init_failures} times): {e}") from e
            self._respawn(i, f"failed to start: {e}")

    def _land(self, ref: Any) -> Flight:
        f = self.flights.pop(ref)
        self.slots[f.slot].load -= 1
        self.progress.stopped()
        return f

    def _on_result(self, ref: Any) -> None:
        f = self.flights[ref]
        try:
            summary = ray.get(ref)
        except ray.exceptions.TaskCancelledError:
            self._land(ref)
            self._record_if_missing(f, "wall_clock", "cancelled by the watchdog", time.monotonic() - f.started)
            return
        except _DIED as e:
            self._worker_died(f.slot, f"died running {f.query.query_id}: {type(e).__name__}")
            return
        except ray.exceptions.RayTaskError as e:  # run_query records harness errors itself; this is a bug
            self._land(ref)
            self._record_if_missing(f, "api_error", f"worker task failed: {e}", time.monotonic() - f.started)
            return
        self._land(ref)
        self.progress.finished(summary)

    def _worker_died(self, i: int, why: str) -> None:
        """Every query the dead worker held goes back to the queue (or is failed after max_attempts deaths)."""
        for ref, f in list(self.flights.items()):
            if f.slot != i:
                continue
            self._land(ref)
            n = self.deaths[f.query.query_id] = self.deaths.get(f.query.query_id, 0) + 1
            if n >= self.cfg.max_attempts:
                error = f"its worker process died {n} times while running it; last: {why}"
                self._record_if_missing(f, "api_error", error, time.monotonic() - f.started)
            else:
                self.queue.appendleft((f.query, f.attempt + 1))
        self._respawn(i, why)

    def _watchdog(self, now: float) -> None:
        for ref, f in list(self.flights.items()):
            if ref not in self.flights:
                continue  # landed by an actor replacement in this same pass
            if f.cancelled_at is None and now - f.started > self.overdue_s:
                f.cancelled_at = now
                self.events.write({"event": "watchdog_cancel", "query_id": f.query.query_id, "slot": f.slot})
                ray.cancel(ref)
            elif f.cancelled_at is not None and now - f.cancelled_at > self.cfg.kill_grace_s:
                self._kill_stuck(f.slot, now)

    def _kill_stuck(self, i: int, now: float) -> None:
        """The actor did not honour a cancel: its overdue queries get `wall_clock` files, the rest are requeued."""
        for ref, f in list(self.flights.items()):
            if f.slot != i:
                continue
            self._land(ref)
            if f.cancelled_at is not None or now - f.started > self.overdue_s:
                error = "the worker did not stop at the wall-clock budget; the watchdog killed it"
                self._record_if_missing(f, "wall_clock", error, now - f.started)
                shutil.rmtree(self.cfg.workspace_dir / safe_name(f.query.query_id), ignore_errors=True)
            else:
                self.queue.appendleft((f.query, f.attempt + 1))
        self._respawn(i, "stuck past its trajectories' wall-clock budget", hard=True)

    def _record_if_missing(self, f: Flight, reason: str, error: str, elapsed: float) -> None:
        """Count a query as done, writing its trajectory file unless its worker already did."""
        path = trajectory_path(self.cfg.out, f.query.query_id)
        if not finished(self.cfg.out, f.query.query_id, self.plan.config_hash):
            write_json_atomic(path, failed_record(self.plan.config_hash, self.cfg, f.query, reason, error, elapsed))
            self.events.write({"event": "driver_record", "query_id": f.query.query_id, "stop_reason": reason})
        self.progress.finished(summary_of(read_json(path)))

    def close(self) -> list[dict[str, Any]]:
        stats = []
        for s in self.slots:
            if s.pid is None:
                ray.kill(s.actor, no_restart=True)  # a replacement that never got work: nothing to report
                continue
            try:
                stats.append(ray.get(s.actor.transport_stats.remote(), timeout=5))
            except Exception:  # noqa: BLE001 - a dead or stuck actor has no stats to give
                pass
            ray.kill(s.actor, no_restart=True)
        self.events.close()
        return stats


def run_on_ray(plan: RunPlan, progress: Progress) -> list[dict[str, Any]]:
    """Run every pending query of `plan` on `workers` actors; returns the actors' transport stats."""
    from rise_batch.executor.structure import init_ray
    from rise_batch.llm.limiter_actor import start_limiter

    init_ray(plan.cfg.ray_address)
    limiter_name, limiter = start_limiter(plan.cfg.llm, plan.config_hash)
    dispatcher = Dispatcher(plan, progress, limiter_name)
    try:
        while not dispatcher.done():
            dispatcher.step()
    finally:
        stats = dispatcher.close()
        del limiter  # held until every trajectory is done
    return stats
