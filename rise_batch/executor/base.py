"""What an executor is given and what it promises, in plain Python (no Ray): datatrove's shape.

A stage is a function over one item, run by a *worker* that is built once per process (or actor) from an importable
factory path and a small config dict, so nothing heavy is pickled and the executor never imports stage code by
name. The driver's side of the stage (`Stage`) says what to do with each outcome: record a result, count progress,
record a lost item or let the loss stop the job loudly. Executors only schedule: bounded work in flight, lost work
resubmitted, a watchdog for items that overrun their deadline. `LocalExecutor` (executor/local.py) runs a stage in
this process, `RayExecutor` (executor/ray.py) on actors; the job drivers choose one from their config.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from rise_batch.registry import load_plugins

LostKind = Literal["died", "cancelled", "stuck", "error"]


class Worker(Protocol):
    """One worker's instance of a stage, built by its factory; `run` is called concurrently for several items.

    Optional: `async def warm_up(self) -> None`, awaited once before the first item when the executor waits for
    its workers to be ready (e.g. load an index before any item's clock starts). Optional: `async def progress(self)`,
    where the items it runs stand (a report of the stage's own type), asked every few seconds by the Ray executor
    for the stage's `on_progress`: the driver's line then moves within a long item, not only at its end.
    """

    async def run(self, item: Any, attempt: int) -> Any: ...

    async def close(self) -> Any:
        """Release what the worker holds; returns its report (e.g. transport counters), gathered by the executor."""
        ...


@dataclass(frozen=True)
class WorkerSpec:
    """How a worker builds the stage: `factory(config, services)` imported from "package.module:name"."""

    factory: str
    config: Mapping[str, Any]
    name: str = "StageWorker"  # the Ray actor class: what `ps`, the dashboard and a process hunter see


def build_worker(spec: WorkerSpec, services: Mapping[str, Any]) -> Worker:
    """Import the factory by its path and build one worker (inside the worker process, never on the driver). On
    Ray, `services` also carries "node": the id of the node the worker runs on (what it caches is that node's)."""
    load_plugins()  # a worker process knows the same registered entries as the driver
    module, _, name = spec.factory.partition(":")
    if not name:
        raise ValueError(f"worker factory {spec.factory!r} is not of the form 'package.module:name'")
    return getattr(importlib.import_module(module), name)(spec.config, services)


@dataclass(frozen=True)
class Lost:
    """An item that did not come back with a result: why, after how many worker deaths, how long it was out."""

    kind: LostKind  # died: its worker died max_attempts times · cancelled: by the watchdog at its deadline ·
    #                 stuck: its worker ignored the cancel and was killed · error: `run` raised
    why: str
    deaths: int
    elapsed: float
    error: BaseException | None = None


class ItemLost(RuntimeError):
    """Raised (loudly, as structure wants) when a stage has no `on_lost` and an item cannot be completed."""


def _nothing(*_args: Any) -> None:
    return None


@dataclass
class Stage:
    """The driver's side of one map: what the workers build, and what to do with every item's outcome.

    Every hook runs on the driver, in its own thread, one at a time. `on_lost` is None for a stage whose lost work
    is a bug (the executor then raises ItemLost, or re-raises the item's own error); a stage that records a failed
    outcome instead (trajectories) supplies it. `stop_on` lists errors that mean "no new items; let the running
    ones finish; then raise" (structure's --max-cost stop). `services(kind)` starts what all workers share (the
    job's limiter actor): it returns the mapping each worker's factory receives and a handle the driver holds until
    every item is done. `finished(item)` is asked before an item is resubmitted: a worker may have written its
    result just before dying (a per-item done marker); a non-None answer is taken as the item's result. `on_node`
    says which node ran an item that came back, so the driver can name it when it does not find what it wrote.
    `on_progress(report)` gets what a Ray worker's `progress()` returns while it holds items (in process a
    worker counts through its services instead); a report can arrive after its item's result, or come again from
    a redone item, so the stage must take it as "where it stands", never as an increment.
    """

    worker: WorkerSpec
    what: str = "stage"  # names the workers in messages: "trajectory workers fail to start"
    describe: Callable[[Any], str] = repr
    on_start: Callable[[Any], None] = _nothing
    on_stop: Callable[[Any], None] = _nothing  # the item left flight, whatever its outcome
    on_result: Callable[[Any, Any], None] = _nothing
    on_node: Callable[[Any, str], None] = _nothing  # (item, Ray node id) of a result, before on_result; Ray only
    on_lost: Callable[[Any, Lost], None] | None = None
    on_event: Callable[[str, Any, dict[str, Any]], None] = _nothing  # (event, item or None, fields)
    finished: Callable[[Any], Any] = _nothing
    on_progress: Callable[[Any], None] | None = None
    services: Callable[[str], tuple[Mapping[str, Any], Any]] | None = None
    stop_on: tuple[type[BaseException], ...] = ()
    stuck_why: str = "stuck past its items' deadline"  # why the watchdog replaced a worker (worker_replaced event)

    def lose(self, item: Any, lost: Lost) -> None:
        """Record a lost item through `on_lost`, or raise: the item's own error, else ItemLost."""
        if self.on_lost is not None:
            self.on_lost(item, lost)
            return
        if lost.kind == "error" and lost.error is not None:
            raise lost.error
        if lost.kind == "died":
            raise ItemLost(
                f"{self.describe(item)} killed its worker {lost.deaths} times; last error: {lost.error}"
            ) from lost.error
        raise ItemLost(f"{self.describe(item)} overran its deadline ({lost.kind}): {lost.why}") from lost.error


@dataclass(frozen=True)
class MapOptions:
    """Scheduling knobs. The local executor uses `max_in_flight` only (no process can die under it)."""

    max_in_flight: int
    per_worker: int | None = None  # items one worker runs at once; default: an equal share of max_in_flight
    spare_calls: int = 1  # actor concurrency beyond per_worker, for control calls (ready, close, cancel)
    max_attempts: int = 3  # deaths of workers holding an item before it is lost
    deadline_s: float | None = None  # an item still out this long is cancelled (budget + grace)
    kill_grace_s: float = 15.0  # a worker that has not honoured a cancel by then is killed and replaced
    wait_ready: bool = True  # build (and warm up) a worker before giving it items; count start failures
    max_start_failures: int = 3
    worker_cpus: float | None = None  # Ray scheduling: CPUs reserved per actor (None: Ray's default)
    worker_memory: int | None = None  # Ray scheduling: bytes of memory reserved per actor (None: none)
    close_timeout_s: float | None = None  # how long to wait for a worker's final report (None: no limit)
    progress_s: float = 2.0  # how often a busy worker is asked for its items' progress (stages with on_progress)


class Executor(Protocol):
    """Maps a stage over items; returns the workers' `close()` reports (per-item outcomes go to the stage's hooks)."""

    def map(self, stage: Stage, items: Sequence[Any]) -> list[Any]: ...
