"""Trajectories on real Ray actors against the fake server: mixed behaviours all end in a result file with the right
stop reason, a killed actor loses no query, a frozen actor is killed by the watchdog, and a re-run does nothing."""

from __future__ import annotations

import json
import os
import signal
import threading
from collections import Counter

import psutil

from rise_batch.agent.job import run_trajectories
from tests.agent.conftest import agent_world, fake_server  # noqa: F401 - fixtures shared with tests/agent
from tests.agent.helpers import read_trajectories, run_config, run_dir, title_query, write_queries


class ProcessHunter(threading.Thread):
    """Signals the Ray worker process running a query, once, when that query's sandboxed `sleep TAG` appears.

    The sleep's process ancestry leads to the actor that runs the trajectory, which is how a test picks the
    process to crash or freeze without any hook in the code under test.
    """

    def __init__(self, actions: dict[str, int]) -> None:
        super().__init__(daemon=True)
        self.actions = actions
        self.hit: dict[str, int] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.02) and len(self.hit) < len(self.actions):
            for p in psutil.process_iter(["cmdline"]):
                cmd = p.info["cmdline"] or []
                tag = cmd[1] if len(cmd) == 2 and cmd[0].endswith("sleep") else None
                if tag in self.actions and tag not in self.hit:
                    worker = _actor_of(p)
                    if worker is not None:
                        os.kill(worker.pid, self.actions[tag])
                        self.hit[tag] = worker.pid


def _actor_of(p: psutil.Process) -> psutil.Process | None:
    """The trajectory actor `p` runs under, if that actor belongs to this test process's own Ray instance."""
    try:
        parents = p.parents()
        if os.getpid() not in {a.pid for a in parents}:  # another test run on the same machine: not ours
            return None
        return next((a for a in parents if "TrajectoryWorker" in " ".join(a.cmdline())), None)
    except psutil.Error:
        return None


def _gone(pid: int) -> bool:
    """Has the process exited (waiting a little for the kill to land)?"""
    try:
        _, alive = psutil.wait_procs([psutil.Process(pid)], timeout=10)
        return not alive or alive[0].status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def _hunting(actions: dict[str, int]) -> ProcessHunter:
    hunter = ProcessHunter(actions)
    hunter.start()
    return hunter


# The trajectories' budget: long enough that every query meant to answer does, even at load 20 and more (a few
# seconds used to be the window, and a busy machine pushed answers past it); the sleeps and hangs meant to be cut go
# on far longer (120 s). How close to the budget a cut one ends: bench/trajectories.py (its overshoot).
WALL_S = 20.0
HANG_MARGIN_S = 30.0


def test_mixed_behaviours_over_two_actors(agent_world, fake_server, ray_local):  # noqa: F811
    out = run_dir("ray-mixed")
    items = list(agent_world.titles.items())
    plan = (
        [("", "answered")] * 26
        + [("[fake:never-answer]", "max_calls")] * 4
        + [("[fake:hang=120]", "wall_clock")] * 4
        + [("[fake:tool-sleep=120]", "wall_clock")] * 2
        + [("[fake:error]", "api_error")] * 2
        + [("[fake:tool-sleep=1.31]", "answered"), ("[fake:tool-sleep=1.37]", "answered")]  # their actor crashes
    )
    rows, expected = [], {}
    for i, (marker, reason) in enumerate(plan):
        docid, title = items[i % len(items)]
        rows.append(title_query(f"q{i:02d}", title, marker, gold_doc_ids=[docid]))
        expected[f"q{i:02d}"] = reason
    queries = write_queries(out / "q.jsonl", rows)
    cfg = run_config(
        out / "run", queries, fake_server.base_url, workers=2, concurrency=8, max_calls=6, wall_clock_s=WALL_S
    )
    hunter = _hunting({"1.31": signal.SIGKILL, "1.37": signal.SIGKILL})
    try:
        stats = run_trajectories(cfg)
    finally:
        hunter.stop.set()
    assert set(hunter.hit) == {"1.31", "1.37"}, "the crash queries never ran"
    got = {qid: t["stop_reason"] for qid, t in read_trajectories(out / "run").items()}
    assert got == expected
    assert stats["missing"] == 0 and stats["trajectories"] == 40
    assert Counter(expected.values()) == Counter(stats["stop_reasons"])
    events = [json.loads(line) for line in (out / "run" / "events.jsonl").read_text().splitlines()]
    assert sum(e["event"] == "worker_replaced" for e in events) == 2
    for qid in ("q38", "q39"):  # the crash queries ran again after their actor died (twice if both hit one)
        assert max(e["attempt"] for e in events if e.get("query_id") == qid) >= 2
    assert all(_gone(pid) for pid in hunter.hit.values())
    # every trajectory ended within its wall-clock budget, give or take what a loaded machine adds (no hang)
    assert max(t["elapsed_s"] for t in read_trajectories(out / "run").values()) < WALL_S + HANG_MARGIN_S

    before = fake_server.stats()["requests"]
    again = run_trajectories(cfg)
    assert again["ran"] == 0 and again["skipped"] == 40
    assert fake_server.stats()["requests"] == before


def test_watchdog_kills_a_frozen_actor(agent_world, fake_server, ray_local):  # noqa: F811
    out = run_dir("ray-frozen")
    items = list(agent_world.titles.items())[:4]
    rows = [title_query(d, t) for d, t in items]
    rows[1] = title_query(items[1][0], items[1][1], "[fake:tool-sleep=2.53]")
    queries = write_queries(out / "q.jsonl", rows)
    cfg = run_config(
        out / "run",
        queries,
        fake_server.base_url,
        workers=2,
        concurrency=2,
        wall_clock_s=WALL_S,
        grace_s=1.0,
        kill_grace_s=1.0,
    )
    hunter = _hunting({"2.53": signal.SIGSTOP})
    try:
        stats = run_trajectories(cfg)
        assert _gone(hunter.hit["2.53"]), "the frozen actor outlived the watchdog"
    finally:
        hunter.stop.set()
        for pid in hunter.hit.values():  # never leave a stopped process behind
            if psutil.pid_exists(pid):
                os.kill(pid, signal.SIGCONT)
    assert "2.53" in hunter.hit
    trajectories = read_trajectories(out / "run")
    frozen = trajectories[items[1][0]]
    assert frozen["stop_reason"] == "wall_clock" and "watchdog" in frozen["error"]
    assert all(t["stop_reason"] == "answered" for q, t in trajectories.items() if q != items[1][0])
    assert stats["trajectories"] == 4
    events = [json.loads(line) for line in (out / "run" / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events if e["event"].startswith(("watchdog", "worker", "driver"))] == [
        "watchdog_cancel",
        "driver_record",
        "worker_replaced",
    ]
