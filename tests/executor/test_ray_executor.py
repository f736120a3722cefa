"""The generic Ray executor on real actors, with a tiny real stage (this module is its factory path): a killed
worker's items are resubmitted, poison is lost after max_attempts (recorded or raised), the watchdog cancels an
overdue item and kills a worker that ignores the cancel, a stop signal lets running items finish."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from rise_batch.executor.base import ItemLost, Lost, MapOptions, Stage, WorkerSpec
from rise_batch.executor.ray import RayExecutor
from tests.executor.test_trajectories_ray import _gone  # waits for a killed process to exit


class Stop(BaseException):
    """A stage's "stop cleanly" signal (like structure's BudgetExceeded)."""


class ToyWorker:
    """Items are "kind:name". Every run leaves `name.attemptN` (holding the pid) in the shared directory."""

    def __init__(self, config: Mapping[str, Any], services: Mapping[str, Any]) -> None:
        self.dir = Path(config["dir"])
        self.services = dict(services)

    async def run(self, item: str, attempt: int) -> dict[str, Any]:
        kind, _, name = item.partition(":")
        (self.dir / f"{name}.attempt{attempt}").write_text(str(os.getpid()))
        if kind == "crashdone":  # writes its result, then dies before reporting it
            (self.dir / f"{name}.done").write_text("from the marker")
        if kind in ("poison", "crashdone") or (kind == "crash" and attempt == 1):
            os.kill(os.getpid(), signal.SIGKILL)
        if kind == "slow":
            await asyncio.sleep(60)
        if kind == "freeze":
            time.sleep(60)  # blocks the actor's event loop: the cancel cannot land
        if kind == "error":
            raise ValueError(f"bad {name}")
        if kind == "stop":
            await asyncio.sleep(0.2)
            raise Stop(name)
        if kind == "late":
            await asyncio.sleep(1.0)
        return {"item": item, "attempt": attempt, "services": self.services, "frozen": gc.get_freeze_count()}

    async def close(self) -> dict[str, Any]:
        return {"pid": os.getpid()}


class Run:
    """One map over the toy stage; what the hooks saw."""

    def __init__(self, tmp_path: Path, record_lost: bool = True) -> None:
        self.dir = tmp_path
        self.results: dict[str, Any] = {}
        self.lost: dict[str, Lost] = {}
        self.events: list[tuple[str, Any, dict]] = []
        self.started: list[str] = []
        self.stage = Stage(
            worker=WorkerSpec(f"{__name__}:ToyWorker", {"dir": str(tmp_path)}, name="ToyWorker"),
            describe=lambda item: f"item {item}",
            on_start=self.started.append,
            on_result=self.results.__setitem__,
            on_lost=self.lost.__setitem__ if record_lost else None,
            on_event=lambda event, item, fields: self.events.append((event, item, fields)),
            finished=self.finished,
            services=lambda kind: ({"kind": kind}, object()),
            stop_on=(Stop,),
        )

    def finished(self, item: str) -> str | None:
        done = self.dir / f"{item.partition(':')[2]}.done"
        return done.read_text() if done.exists() else None

    def map(self, items: list[str], workers: int = 2, **options: Any) -> list[Any]:
        options = {"max_in_flight": 4, "worker_cpus": 0.5, **options}
        return RayExecutor(workers, MapOptions(**options)).map(self.stage, items)

    def pid(self, name: str, attempt: int = 1) -> int:
        return int((self.dir / f"{name}.attempt{attempt}").read_text())


def test_items_map_to_results_and_workers_report(tmp_path, ray_local) -> None:
    run = Run(tmp_path)
    items = [f"ok:{i}" for i in range(8)]
    reports = run.map(items)
    assert set(run.results) == set(items) and not run.lost
    assert all(r["attempt"] == 1 and r["services"]["kind"] == "ray" for r in run.results.values())
    # each worker is told the Ray node it runs on (what it caches there is that node's)
    import ray

    nodes = {n["NodeID"] for n in ray.nodes()}
    assert all(r["services"]["node"] in nodes for r in run.results.values())
    assert 1 <= len(reports) <= 2 and all("pid" in r for r in reports)
    # what a worker loaded before its first item (imports, an index) is out of the collector's sight: a full
    # collection no longer traverses it in the middle of an item
    assert all(r["frozen"] > 10_000 for r in run.results.values())


def test_a_killed_worker_is_replaced_and_its_items_resubmitted(tmp_path, ray_local) -> None:
    run = Run(tmp_path)
    items = ["crash:c", "late:l1", "ok:a", "ok:b"]
    run.map(items, workers=1)
    assert set(run.results) == set(items) and not run.lost
    assert run.results["crash:c"]["attempt"] == 2
    assert run.results["late:l1"]["attempt"] == 2  # it was running on the same worker: resubmitted too
    replaced = [f for e, _, f in run.events if e == "worker_replaced"]
    assert len(replaced) == 1 and replaced[0]["why"].startswith("died running item ")  # whichever surfaced first
    assert replaced[0]["pid"] == run.pid("c")  # the driver knew whom it replaced
    assert _gone(run.pid("c"))


def test_a_result_written_before_the_death_is_not_run_again(tmp_path, ray_local) -> None:
    run = Run(tmp_path)
    run.map(["crashdone:d"], workers=1)
    assert run.results == {"crashdone:d": "from the marker"}
    assert not (tmp_path / "d.attempt2").exists()


def test_poison_is_recorded_as_lost_after_max_attempts(tmp_path, ray_local) -> None:
    run = Run(tmp_path)
    run.map(["poison:p", "ok:a", "error:e"], max_attempts=2, max_in_flight=2, per_worker=1)  # poison runs alone
    assert set(run.results) == {"ok:a"}
    died, failed = run.lost["poison:p"], run.lost["error:e"]
    assert died.kind == "died" and died.deaths == 2 and "died running item poison:p" in died.why
    assert (tmp_path / "p.attempt2").exists() and not (tmp_path / "p.attempt3").exists()
    assert failed.kind == "error" and "bad e" in str(failed.error)


def test_without_on_lost_poison_and_errors_fail_loudly(tmp_path, ray_local) -> None:
    with pytest.raises(ItemLost, match=r"^item poison:p killed its worker 2 times; last error: "):
        Run(tmp_path, record_lost=False).map(["poison:p"], workers=1, max_attempts=2)
    with pytest.raises(ValueError, match="bad e"):
        Run(tmp_path, record_lost=False).map(["error:e"], workers=1)


def test_watchdog_cancels_overdue_items_and_kills_a_worker_that_ignores_it(tmp_path, ray_local) -> None:
    run = Run(tmp_path)
    run.map(["slow:s", "freeze:f", "ok:a"], max_in_flight=2, per_worker=1, deadline_s=1.0, kill_grace_s=1.0)
    assert set(run.results) == {"ok:a"}
    assert run.lost["slow:s"].kind == "cancelled" and run.lost["freeze:f"].kind == "stuck"
    assert run.lost["freeze:f"].elapsed >= 2.0
    names = [(e, item) for e, item, _ in run.events]
    assert ("watchdog_cancel", "slow:s") in names
    assert names.index(("watchdog_cancel", "freeze:f")) < names.index(("worker_replaced", None))
    stuck = [f for e, _, f in run.events if e == "worker_replaced"]
    assert [f["why"] for f in stuck] == [run.stage.stuck_why]
    assert _gone(run.pid("f"))  # SIGKILLed: a frozen process never answers ray.kill


def test_a_stop_signal_lets_running_items_finish_then_raises(tmp_path, ray_local) -> None:
    run = Run(tmp_path)
    with pytest.raises(Stop):
        run.map(["late:l", "stop:s", "ok:a", "ok:b", "ok:c"], max_in_flight=2, per_worker=1)
    assert set(run.results) == {"late:l"}  # was running when the stop came: it finished
    assert run.started == ["late:l", "stop:s"]  # nothing new after the stop
