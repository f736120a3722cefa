"""The Ray executor: actors that build a stage once and run its items, and an ordered task map for the index build.

`RayExecutor.map` keeps at most `max_in_flight` items out over `workers` actors (each runs `per_worker` at once, on
its own event loop). Actors receive a WorkerSpec (a factory path and a small config) and items (shard specs,
queries), never documents, so nothing large crosses the object store. What it does when things go wrong:

- an actor that dies (crash, a kill by Ray's memory monitor) is replaced and every item it held goes back to the
  queue; an item whose workers died `max_attempts` times under it is lost: the stage records it (`on_lost`) or the
  job fails loudly. When Ray's memory monitor killed them every time, nothing is lost: no new items start, and once
  the running ones finish the map raises MemoryPressure, one line with the node's figures and the remedy (exit 75).
  Actors reserve `worker_memory` bytes (Ray's `memory` resource), so Ray places no more of them on a node than
  its memory holds;
- with a deadline, an item still out at the deadline is cancelled; if its actor does not answer the cancel within
  `kill_grace_s` (a frozen process, a blocked event loop) the actor is killed (SIGKILL when it is on this node:
  a frozen process never answers ray.kill) and replaced, its overdue items are lost, the others requeued;
- an error listed in the stage's `stop_on` stops new items; the running ones finish; then it is raised.

This module and rise_batch/llm/limiter_actor.py are the only ones that import ray at module level.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import signal
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rise_batch.errors import USER_ERRORS
from rise_batch.executor.base import Lost, LostKind, MapOptions, Stage, WorkerSpec, build_worker
from rise_batch.executor.memory import OOM, check_memory, memory_pressure
from rise_batch.heap import freeze_loaded
from rise_batch.logs import route_ray_logging

POLL_S = 0.2
# What a driver's environment lends to every actor and task of a cluster it attaches to (with `init_ray(env=...)`'s
# names: the LLM key's variable, llm.api_key_env): the storage credentials pyarrow's and fsspec's filesystems read.
# Workers on other nodes start from their raylet's environment, not the driver's, so without this a key exported in
# the shell that runs `rise-batch ... --ray-address` reaches no actor. The one list of these names.
FORWARDED_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_CLOUD_PROJECT",
)
_DIED = (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError, ray.exceptions.ActorUnavailableError, OOM)


def forwarded_env(names: Sequence[str] = (), environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The variables of FORWARDED_ENV and `names` set in `environ`, less those the runtime env of a submitted job
    sets already (its driver runs with them, its workers get them; Ray refuses to merge a variable set twice)."""
    job = json.loads(environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR") or "{}").get("runtime_env") or {}
    given = job.get("env_vars") or {}
    return {n: environ[n] for n in dict.fromkeys((*FORWARDED_ENV, *names)) if environ.get(n) and n not in given}


def init_ray(address: str | None, log_to_driver: bool = True, env: Sequence[str] = ()) -> None:
    """Connect to `address`, to the cluster of a `ray job submit` (RAY_ADDRESS), or start a local Ray.

    Never ray.init()'s own fallback: without an address it attaches to whatever `ray start` cluster last ran on the
    machine (read from /tmp/ray/ray_current_cluster), so a command meant to run locally would use, or fail on the
    auth token of, someone else's cluster. "local" always starts a private one; RAY_ADDRESS must then be passed
    explicitly, because "local" ignores it.

    Attached to a cluster, the job's runtime env carries `forwarded_env(env)` to every actor and task, merged by Ray
    with a submitted job's own (a local Ray's workers inherit this process's environment anyway). The first call
    of a process decides: Ray takes a runtime env only when it connects."""
    if not ray.is_initialized():
        route_ray_logging()  # Ray's records through the command's one handler, its token-auth notice demoted
        target = address or os.environ.get("RAY_ADDRESS") or "local"
        if target == "local":  # Ray starts workers at niceness 15: beside any busy process they starved (issue 14)
            os.environ.setdefault("RAY_worker_niceness", "0")  # as `ray job submit` runs its jobs; the raylet reads it
        lent = forwarded_env(env) if target != "local" else {}
        runtime_env = {"env_vars": lent} if lent else None
        ray.init(address=target, log_to_driver=log_to_driver, include_dashboard=False, runtime_env=runtime_env)
        if target == "local":
            atexit.register(stop_local_ray)  # runs before Ray's own exit hook, registered when ray was imported


def stop_local_ray() -> None:
    """Shut down the local Ray this process started, without the dead time of Ray's own exit hook (issue 14).

    Ray's hook sleeps 0.5 s for late log lines, then stops each process with SIGTERM and up to 1 s of waiting. The
    autoscaler monitor spends that whole second: it is stopped after the GCS and its SIGTERM handler reports its own
    death to the GCS that is already gone. It holds nothing of a private local Ray worth saving, so it is killed
    first; the rest is ray.shutdown() (the raylet stops the workers, then the GCS and the other processes go).
    Ray's own hook then finds nothing left to do."""
    if not ray.is_initialized():
        return
    from ray._private import ray_constants, worker  # no public handle on the processes ray.init started

    node = getattr(worker, "_global_node", None)
    for info in getattr(node, "all_processes", {}).get(ray_constants.PROCESS_TYPE_MONITOR, []):
        if info.process.poll() is None:
            info.process.kill()
            info.process.wait(timeout=5)
    ray.shutdown()


class _StageActor:
    """Builds the stage's worker once, then runs items on request (several at once: an async actor)."""

    def __init__(self, spec: WorkerSpec, services: Mapping[str, Any]) -> None:
        self.where = (os.getpid(), ray.get_runtime_context().get_node_id())
        self.worker = build_worker(spec, {**services, "node": self.where[1]})  # which node's caches it fills

    async def ready(self) -> tuple[int, str]:
        """Warm up before the first item starts its clock; returns (pid, node id) for the watchdog."""
        warm_up = getattr(self.worker, "warm_up", None)
        if warm_up is not None:
            await warm_up()
        freeze_loaded()  # what it loaded lives as long as the actor: out of every later collection
        return self.where

    async def run(self, item: Any, attempt: int) -> tuple[str, Any]:
        """(this actor's node id, the item's result): the driver records where each item ran."""
        return self.where[1], await self.worker.run(item, attempt)

    async def progress(self) -> Any:
        """Where the worker's items stand (its `progress()`, None without one), for the driver's progress line."""
        progress = getattr(self.worker, "progress", None)
        return await progress() if progress is not None else None

    async def close(self) -> Any:
        return await self.worker.close()


_ACTOR_CLASSES: dict[str, Any] = {}


def _actor_class(name: str) -> Any:
    """An actor class named after the stage's workers (StructureWorker, ...): process titles show `ray::<name>`."""
    if name not in _ACTOR_CLASSES:
        cls = type(name, (_StageActor,), {"__module__": __name__, "__qualname__": name})
        _ACTOR_CLASSES[name] = ray.remote(cls)
    return _ACTOR_CLASSES[name]


@dataclass
class _Flight:
    slot: int
    index: int  # into the items
    attempt: int
    started: float
    cancelled_at: float | None = None


@dataclass
class _Slot:
    actor: Any
    ready_ref: Any  # None once ready
    pid: int | None = None
    node: str | None = None
    load: int = 0
    progress_ref: Any = None  # an outstanding progress() call
    progress_at: float = 0.0  # when it was asked


def placement(slot: int) -> Any:
    """Where actor `slot` goes: the nodes with CPUs in turn, the driver's first, as a soft affinity (another node
    when that one is gone or cannot take it). An actor holds no CPU once placed, so Ray alone may put every actor
    on one node, and its SPREAD is best effort: on a 2-node cluster both actors of a run landed on the head in some
    runs, leaving the other node idle."""
    here = ray.get_runtime_context().get_node_id()
    nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]
    nodes.sort(key=lambda node: (node != here, node))
    if len(nodes) < 2:
        return "SPREAD"
    return NodeAffinitySchedulingStrategy(nodes[slot % len(nodes)], soft=True)


class RayExecutor:
    """A stage's items over `workers` Ray actors (started on a local Ray, or the cluster at `address`)."""

    name = "ray"

    def __init__(self, workers: int, options: MapOptions, address: str | None = None, env: Sequence[str] = ()) -> None:
        """`env`: names of variables the actors need beyond FORWARDED_ENV (the LLM key's), see init_ray."""
        self.workers, self.options, self.address, self.env = max(workers, 1), options, address, env

    def map(self, stage: Stage, items: Sequence[Any]) -> list[Any]:
        init_ray(self.address, env=self.env)
        services, handle = stage.services("ray") if stage.services is not None else ({}, None)
        d = _Dispatch(stage, items, self.options, self.workers, services)
        try:
            while d.queue or d.flights:
                d.step()
            reports = d.close()
        finally:
            d.kill_all()
            del handle  # shared services are held until every item is done
        if d.stopped is not None:
            raise d.stopped
        return reports


class _Dispatch:
    """The driver's bookkeeping for one map: actors, queue, flights, deaths; one `step()` per poll."""

    def __init__(
        self, stage: Stage, items: Sequence[Any], options: MapOptions, n: int, services: Mapping[str, Any]
    ) -> None:
        self.stage, self.items, self.o, self.services = stage, items, options, services
        self.per = options.per_worker or max(1, math.ceil(options.max_in_flight / n))
        self.cls = _actor_class(stage.worker.name)
        self.queue: deque[tuple[int, int]] = deque((i, 1) for i in range(len(items)))  # (index, attempt)
        self.flights: dict[Any, _Flight] = {}
        self.deaths: dict[int, int] = {}
        self.oom_kills = 0  # actors Ray's memory monitor killed
        self.start_failures = 0
        self.stopped: BaseException | None = None
        if options.worker_memory:
            check_memory(stage.what, options.worker_memory)
        self.slots = [self._spawn(i) for i in range(n)]

    def _spawn(self, i: int) -> _Slot:
        opts: dict[str, Any] = {"max_concurrency": self.per + self.o.spare_calls, "scheduling_strategy": placement(i)}
        if self.o.worker_cpus is not None:
            opts["num_cpus"] = self.o.worker_cpus
        if self.o.worker_memory:
            opts["memory"] = self.o.worker_memory
        actor = self.cls.options(**opts).remote(self.stage.worker, self.services)
        return _Slot(actor, actor.ready.remote() if self.o.wait_ready else None)

    def _respawn(self, i: int, why: str, hard: bool = False) -> None:
        old = self.slots[i]
        self.stage.on_event("worker_replaced", None, {"slot": i, "pid": old.pid, "why": why})
        ray.kill(old.actor, no_restart=True)
        if hard and old.pid is not None and old.node == ray.get_runtime_context().get_node_id():
            try:  # ray.kill asks the worker to exit; a frozen process never answers, so make sure
                os.kill(old.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.slots[i] = self._spawn(i)

    def step(self) -> None:
        self._submit()
        starting = {s.ready_ref: i for i, s in enumerate(self.slots) if s.ready_ref is not None}
        refs = list(self.flights) + list(starting)
        if refs:
            ready, _ = ray.wait(refs, num_returns=1, timeout=POLL_S)
            if ready:
                ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            for ref in ready:
                if ref in starting:
                    self._on_ready(starting[ref], ref)
                elif ref in self.flights:  # not landed by an actor replacement in this same pass
                    self._on_result(ref)
        self._watchdog(time.monotonic())
        self._progress(time.monotonic())

    def _progress(self, now: float) -> None:
        """Hand the workers' answers about their items to the stage, and ask each busy worker again every
        `progress_s`. One call out per worker at a time; a dead worker's call fails and is dropped (its items are
        resubmitted, and their counts start again: the stage takes counts as where an item stands)."""
        if self.stage.on_progress is None:
            return
        asked = [s.progress_ref for s in self.slots if s.progress_ref is not None]
        answered = set(ray.wait(asked, num_returns=len(asked), timeout=0)[0]) if asked else set()
        for s in self.slots:
            if s.progress_ref is not None and s.progress_ref in answered:
                ref, s.progress_ref = s.progress_ref, None
                try:
                    report = ray.get(ref)
                except Exception:  # noqa: BLE001, S112 - the worker died or was replaced: nothing to show
                    continue
                if report is not None:
                    self.stage.on_progress(report)
            if s.progress_ref is None and s.load and now - s.progress_at >= self.o.progress_s:
                s.progress_ref, s.progress_at = s.actor.progress.remote(), now

    def _submit(self) -> None:
        """Fill the least loaded ready actors, keeping at most `max_in_flight` items out in total."""
        while self.queue and len(self.flights) < self.o.max_in_flight:
            ready = [i for i, s in enumerate(self.slots) if s.ready_ref is None and s.load < self.per]
            if not ready:
                return
            i = min(ready, key=lambda j: self.slots[j].load)
            index, attempt = self.queue.popleft()
            item = self.items[index]
            if attempt > 1 and (done := self.stage.finished(item)) is not None:
                self.stage.on_result(item, done)  # its worker finished it just before dying
                continue
            ref = self.slots[i].actor.run.remote(item, attempt)
            self.flights[ref] = _Flight(i, index, attempt, time.monotonic())
            self.slots[i].load += 1
            self.stage.on_start(item)

    def _on_ready(self, i: int, ref: Any) -> None:
        try:
            self.slots[i].pid, self.slots[i].node = ray.get(ref)
            self.slots[i].ready_ref = None
        except (*_DIED, ray.exceptions.RayTaskError) as e:
            self.start_failures += 1
            if self.start_failures >= self.o.max_start_failures:
                raise RuntimeError(f"{self.stage.what} workers fail to start ({self.start_failures} times): {e}") from e
            self._respawn(i, f"failed to start: {e}")

    def _land(self, ref: Any) -> _Flight:
        f = self.flights.pop(ref)
        self.slots[f.slot].load -= 1
        self.stage.on_stop(self.items[f.index])
        return f

    def _lost(self, f: _Flight, kind: LostKind, why: str, error: BaseException | None = None) -> None:
        elapsed = time.monotonic() - f.started
        self.stage.lose(self.items[f.index], Lost(kind, why, self.deaths.get(f.index, 0), elapsed, error))

    def _on_result(self, ref: Any) -> None:
        f = self.flights[ref]
        item = self.items[f.index]
        try:
            node, result = ray.get(ref)
        except ray.exceptions.TaskCancelledError:
            self._land(ref)
            self._lost(f, "cancelled", "cancelled by the watchdog")
            return
        except _DIED as e:
            self._worker_died(f.slot, ref, f"died running {self.stage.describe(item)}: {type(e).__name__}", e)
            return
        except self.stage.stop_on as e:  # Ray re-raises it as a subclass that keeps the original as `cause`
            self._land(ref)
            self.stopped = self.stopped or getattr(e, "cause", e)
            self.queue.clear()  # no new items; the running ones finish
            return
        except ray.exceptions.RayTaskError as e:
            self._land(ref)
            self._lost(f, "error", str(e), e)
            return
        self._land(ref)
        self.stage.on_node(item, node)
        self.stage.on_result(item, result)

    def _worker_died(self, i: int, first: Any, why: str, error: BaseException) -> None:
        """Every item the dead actor held goes back to the queue, or is lost after max_attempts deaths."""
        held = sorted((ref for ref, f in self.flights.items() if f.slot == i), key=lambda ref: ref != first)
        requeue: list[tuple[int, int]] = []
        self.oom_kills += isinstance(error, OOM)
        for ref in held:  # the item whose failure surfaced first, then the others in submission order
            f = self._land(ref)
            n = self.deaths[f.index] = self.deaths.get(f.index, 0) + 1
            if n >= self.o.max_attempts and isinstance(error, OOM):  # not the item's doing: stop, lose nothing
                self.stopped = self.stopped or memory_pressure(self.stage.what, self.oom_kills, n, error)
                self.queue.clear()
            elif n >= self.o.max_attempts:
                self._lost(f, "died", why, error)
            else:
                requeue.append((f.index, f.attempt + 1))
        self.queue.extendleft(reversed(requeue))
        self._respawn(i, why)

    def _watchdog(self, now: float) -> None:
        if self.o.deadline_s is None:
            return
        for ref, f in list(self.flights.items()):
            if ref not in self.flights:
                continue  # landed by an actor replacement in this same pass
            if f.cancelled_at is None and now - f.started > self.o.deadline_s:
                f.cancelled_at = now
                self.stage.on_event("watchdog_cancel", self.items[f.index], {"slot": f.slot})
                ray.cancel(ref)
            elif f.cancelled_at is not None and now - f.cancelled_at > self.o.kill_grace_s:
                self._kill_stuck(f.slot, now)

    def _kill_stuck(self, i: int, now: float) -> None:
        """The actor did not honour a cancel: its overdue items are lost, the rest are requeued."""
        assert self.o.deadline_s is not None
        for ref, f in list(self.flights.items()):
            if f.slot != i:
                continue
            self._land(ref)
            if f.cancelled_at is not None or now - f.started > self.o.deadline_s:
                self._lost(f, "stuck", "the worker did not stop at its deadline; the watchdog killed it")
            else:
                self.queue.appendleft((f.index, f.attempt + 1))
        self._respawn(i, self.stage.stuck_why, hard=True)

    def close(self) -> list[Any]:
        """Every started actor's report (a dead or stuck one has none to give), gathered in parallel."""
        asked = [(s, s.actor.close.remote()) for s in self.slots if s.ready_ref is None]
        reports = []
        for _, ref in asked:
            try:
                reports.append(ray.get(ref, timeout=self.o.close_timeout_s))
            except Exception:  # noqa: BLE001, S112 - nothing to report
                continue
        return reports

    def kill_all(self) -> None:
        for s in self.slots:
            ray.kill(s.actor, no_restart=True)


def task_map(
    fn: Callable[..., tuple[Any, Any]],
    items: Sequence[Any],
    *shared: Any,
    max_in_flight: int | None = None,
    max_retries: int = 2,
    options: Mapping[str, Any] | None = None,
) -> Iterator[tuple[Any, Callable[[], Any]]]:
    """`fn(item, *shared) -> (summary, payload)` as one Ray task per item; yields (summary, fetch payload) in order.

    Each task returns two objects: the small summary, which the caller gets as soon as the items before it are
    done, and the payload, which stays in the object store (spilled to disk by Ray if need be) until the caller
    fetches it, once. So the driver holds one payload at a time. `shared` arguments are put in the store once.
    At most `max_in_flight` tasks (default: twice the cluster's CPUs) are out at once. `options` are Ray task
    resources (e.g. {"num_gpus": 1} for the dense index's embedding), asked of every task.
    """
    task = ray.remote(num_returns=2, max_retries=max_retries, **dict(options or {}))(fn)
    window = max_in_flight or max(2, 2 * int(ray.cluster_resources().get("CPU", 1)))
    shared_refs = [ray.put(a) for a in shared]
    refs: dict[int, tuple[Any, Any]] = {}
    nxt = 0
    for i in range(len(items)):
        while nxt < len(items) and nxt < i + window:
            refs[nxt] = task.remote(items[nxt], *shared_refs)
            nxt += 1
        summary_ref, payload_ref = refs.pop(i)
        try:
            summary = ray.get(summary_ref)
        except ray.exceptions.RayTaskError as e:
            if isinstance(e.cause, USER_ERRORS):  # bad input (a corrupt corpus file): its one-line message, as local
                raise e.cause from None
            raise
        yield summary, _Fetch(payload_ref)


class _Fetch:
    """A payload fetched on demand; the reference is dropped once fetched so Ray can free it."""

    def __init__(self, ref: Any) -> None:
        self.ref: Any = ref

    def __call__(self) -> Any:
        if self.ref is None:
            raise RuntimeError("payload already fetched")
        payload = ray.get(self.ref)
        self.ref = None
        return payload
