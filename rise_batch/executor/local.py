"""In-process executors: a stage's items on one event loop, and an ordered map over a process pool.

`LocalExecutor` is the `workers: 0` path of structure and trajectories (debugging, small runs): one worker built
once, `max_in_flight` items at a time, taken in order. Nothing can die under it, so there is nothing to resubmit
and no watchdog (a stage keeps its own per-item deadline). The first error stops new items from starting; the
running ones finish, the worker is closed, then the error is raised, the same order as a budget stop on Ray.

`process_map` is the index build's local runner: a function over shards in spawned processes, results in input
order, so the merge sees the corpus in order whatever the workers' speeds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from rise_batch.executor.base import MapOptions, Stage, build_worker


class LocalExecutor:
    """Runs a stage in this process: `options.max_in_flight` items concurrently on one asyncio loop."""

    name = "local"

    def __init__(self, options: MapOptions) -> None:
        self.options = options

    def map(self, stage: Stage, items: Sequence[Any]) -> list[Any]:
        return asyncio.run(self.amap(stage, items))

    async def amap(self, stage: Stage, items: Sequence[Any]) -> list[Any]:
        services, handle = stage.services("local") if stage.services is not None else ({}, None)
        worker = build_worker(stage.worker, services)
        todo = iter(items)
        errors: list[BaseException] = []

        async def lane() -> None:
            for item in todo:  # lanes share one iterator: items start in order
                if errors:
                    return
                stage.on_start(item)
                try:
                    result = await worker.run(item, 1)
                except BaseException as e:  # raised below, once the running items are done
                    if not isinstance(e, (Exception, *stage.stop_on)):
                        raise  # cancellation, Ctrl-C
                    errors.append(e)
                    return
                finally:
                    stage.on_stop(item)
                stage.on_result(item, result)

        try:
            await asyncio.gather(*(lane() for _ in range(max(1, self.options.max_in_flight))))
        finally:
            report = await worker.close()
            del handle  # shared services are held until every item is done
        if errors:
            raise errors[0]
        return [report]


def node_cpus() -> int:
    """The cores this process may run on (its affinity, which a container or `taskset` narrows)."""
    import os

    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def process_map(
    fn: Callable[..., Any], calls: Sequence[tuple[Any, ...]], workers: int, start_method: str = "spawn"
) -> Iterator[Any]:
    """`fn(*call)` for every call, in `workers` processes with at most `2 * workers` in flight; yields in order.

    workers <= 1 runs inline. Workers are spawned, not forked (the parent may hold threads, e.g. pyarrow's), and
    not from a forkserver, whose own resident memory would add to the job's. A script calling this with workers > 1
    needs an `if __name__ == "__main__":` guard, as with any multiprocessing.
    """
    workers = max(1, int(workers))
    if workers == 1:
        for call in calls:
            yield fn(*call)
        return
    import multiprocessing as mp

    window = 2 * workers
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context(start_method)) as pool:
        pending: dict[int, Future] = {}
        nxt = 0
        try:
            for i in range(len(calls)):
                while nxt < len(calls) and nxt < i + window:
                    pending[nxt] = pool.submit(fn, *calls[nxt])
                    nxt += 1
                yield pending.pop(i).result()
        finally:
            for f in pending.values():
                f.cancel()
