"""Per-trajectory work of a report spread over the machine's cores, without pickling the trajectories.

A report over 10,000 trajectories of 50 steps computes every query's interaction metrics and writes one data file
per trajectory for report.html: pure Python, one core each. The trajectories are already in the driver's memory, so
the work is done by forked workers that inherit it: `fork_map(fn, n)` runs `fn(start, stop)` over spans of
range(n) in worker processes forked *after* `fn` (a closure over the trajectories) is set, and only the results
travel back, pickled (small rows). Where fork is missing, the work is small or the cores are busy with other
work, it runs in this process.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
from collections.abc import Callable
from typing import Any

MIN_ITEMS = 256  # below this a fork costs more than it saves
SPAN = 200  # items a worker takes at a time (about a second of work at 50 steps a trajectory)

_TASK: Callable[[int, int], list[Any]] | None = None


def _run(span: tuple[int, int]) -> list[Any]:
    assert _TASK is not None  # set by fork_map before the workers were forked
    return _TASK(*span)


def workers() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def spare_cores() -> int:
    """Cores of this process not busy with other work (by the 1-minute load average). A forked worker pays for the
    pages it copies from the driver (~1.3 GB at 10,000 trajectories of 50 steps): measured on a 2-core machine at
    load 15-28, 2,000 trajectories took 8.5-9.7 CPU seconds in one process and 10-11.7 forked, and no less wall
    time, so workers are forked only onto cores that are free."""
    try:
        return max(0, workers() - int(os.getloadavg()[0] + 0.5))
    except OSError:  # no load average
        return workers()


def fork_map(fn: Callable[[int, int], list[Any]], n: int, *, processes: int | None = None) -> list[Any]:
    """fn(0, a) + fn(a, b) + ... + fn(z, n), in order, computed by forked workers when it pays (`processes`
    of them, by default one per spare core). In a worker of another fork_map or fork_each it runs in this process
    (a pool's worker may not fork one of its own)."""
    procs = min(processes or spare_cores(), -(-n // SPAN))
    if procs < 2 or n < MIN_ITEMS or not can_fork():
        return fn(0, n)
    return _pool_map(fn, [(a, min(a + SPAN, n)) for a in range(0, n, SPAN)], procs)


def fork_each(fn: Callable[[int], Any], n: int, *, processes: int | None = None) -> list[Any]:
    """[fn(0), fn(1), ..., fn(n - 1)] in order, each call in a forked worker (`processes` of them, by default one
    per core of this process, busy or not), for a few large items that each load their own data (a report's
    runs): unlike fork_map's items they share nothing with the driver, so a worker copies no pages of it, and
    two workers take a fair share of the cores twice over on a loaded machine."""
    procs = min(processes or workers(), n)
    if procs < 2 or not can_fork():
        return [fn(i) for i in range(n)]
    return _pool_map(lambda a, b: [fn(i) for i in range(a, b)], [(i, i + 1) for i in range(n)], procs)


def can_fork() -> bool:
    """Whether this process may fork a pool: fork exists and it is no pool worker itself."""
    return "fork" in multiprocessing.get_all_start_methods() and not multiprocessing.current_process().daemon


def _pool_map(fn: Callable[[int, int], list[Any]], spans: list[tuple[int, int]], procs: int) -> list[Any]:
    global _TASK
    _TASK = fn
    gc.freeze()  # the inherited objects out of the workers' collections: a collection would touch (copy) every page
    try:
        with multiprocessing.get_context("fork").Pool(procs) as pool:
            return [x for part in pool.imap(_run, spans) for x in part]
    finally:
        _TASK = None
        gc.unfreeze()
