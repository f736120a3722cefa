"""The in-process executor and the ordered process map, with a tiny real stage (this module is its factory path)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import Any

import pytest

from rise_batch.executor import executor_for
from rise_batch.executor.base import MapOptions, Stage, WorkerSpec
from rise_batch.executor.local import LocalExecutor, process_map


class Stop(BaseException):
    """A stage's "stop cleanly" signal (like structure's BudgetExceeded, a BaseException)."""


class CountingWorker:
    """Sleeps a little per item, tracks how many items run at once, fails or stops on request."""

    def __init__(self, config: Mapping[str, Any], services: Mapping[str, Any]) -> None:
        self.delay = config["delay"]
        self.log: list = services["log"]
        self.running = 0
        self.log.append(("built", dict(services)))

    async def run(self, item: Any, attempt: int) -> Any:
        self.running += 1
        self.log.append(("peak", self.running))
        try:
            await asyncio.sleep(self.delay)
            if item == "boom":
                raise ValueError("boom")
            if item == "stop":
                raise Stop("stop")
            return (item, attempt)
        finally:
            self.running -= 1

    async def close(self) -> dict:
        self.log.append(("closed",))
        return {"pid": os.getpid()}


def stage(log: list, delay: float = 0.01, **hooks: Any) -> Stage:
    results: list = hooks.pop("results", [])
    return Stage(
        worker=WorkerSpec(f"{__name__}:CountingWorker", {"delay": delay}),
        on_result=lambda item, r: results.append(r),
        services=lambda kind: ({"log": log, "kind": kind}, object()),
        **hooks,
    )


def test_items_run_in_order_bounded_and_the_worker_is_built_once() -> None:
    log: list = []
    results: list = []
    events: list = []
    s = stage(
        log,
        results=results,
        on_start=lambda i: events.append(("start", i)),
        on_stop=lambda i: events.append(("stop", i)),
    )
    reports = executor_for(0, MapOptions(max_in_flight=3)).map(s, list(range(10)))
    assert reports == [{"pid": os.getpid()}]
    assert sorted(results) == [(i, 1) for i in range(10)]
    assert [e[1] for e in events if e[0] == "start"] == list(range(10))  # items start in order
    assert max(v[1] for v in log if v[0] == "peak") == 3
    assert [v for v in log if v[0] == "built"] == [("built", {"log": log, "kind": "local"})]
    assert log[-1] == ("closed",)


def test_one_at_a_time_is_strictly_sequential() -> None:
    log: list = []
    results: list = []
    LocalExecutor(MapOptions(max_in_flight=1)).map(stage(log, results=results), ["a", "b", "c"])
    assert results == [("a", 1), ("b", 1), ("c", 1)]
    assert {v[1] for v in log if v[0] == "peak"} == {1}


def test_an_error_stops_new_items_lets_running_ones_finish_then_raises() -> None:
    log: list = []
    results: list = []
    items = ["a", "boom", "c", "d", "e", "f"]
    with pytest.raises(ValueError, match="boom"):
        LocalExecutor(MapOptions(max_in_flight=2)).map(stage(log, results=results), items)
    assert ("a", 1) in results and len(results) <= 2  # at most the one running beside "boom" finished
    assert log[-1] == ("closed",)


def test_a_stop_signal_is_raised_after_the_running_items() -> None:
    log: list = []
    results: list = []
    with pytest.raises(Stop):
        LocalExecutor(MapOptions(max_in_flight=1)).map(stage(log, results=results, stop_on=(Stop,)), ["a", "stop", "c"])
    assert results == [("a", 1)]
    assert log[-1] == ("closed",)


def square_pid(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


def test_process_map_yields_in_order_inline_or_in_spawned_processes() -> None:
    calls = [(i,) for i in range(9)]
    inline = list(process_map(square_pid, calls, workers=1))
    assert [r[0] for r in inline] == [i * i for i in range(9)] and {r[1] for r in inline} == {os.getpid()}
    pooled = list(process_map(square_pid, calls, workers=2))
    assert [r[0] for r in pooled] == [i * i for i in range(9)] and os.getpid() not in {r[1] for r in pooled}
