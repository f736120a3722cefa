"""A command that started a local Ray leaves none of its processes behind, and keeps its exit code.

executor.ray.init_ray registers its own exit hook for a local Ray (stop_local_ray: the autoscaler monitor killed
first, then ray.shutdown() without Ray's 0.5 s grace), ahead of Ray's. Its gain is time, measured by
bench/run_startup.py; what a test can hold it to is that the faster exit still stops everything: the GCS, raylet,
monitors, dashboard, the raylet's agents and the actors' workers, all gone when the command returns. Real Ray in a
real subprocess with its own RAY_TMPDIR, as the commands start it.
"""

from __future__ import annotations

import time

import psutil
import pytest

from tests.executor.test_ray_niceness import run_with_own_ray

pytestmark = pytest.mark.slow

PROBE = """
import os, sys, psutil, ray
from ray._private import worker
from rise_batch.executor.ray import init_ray

init_ray(None)
actor = ray.get(ray.remote(lambda: os.getpid()).remote())  # a worker of the session
started = [i.process.pid for infos in worker._global_node.all_processes.values() for i in infos]
tree = {p.pid for pid in started for p in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]}
print(" ".join(map(str, sorted(tree | {actor}))), actor, flush=True)
sys.exit(3)
"""


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_local_ray_is_stopped_whole_at_exit_and_the_exit_code_kept() -> None:
    out = run_with_own_ray(PROBE)
    assert out.returncode == 3, out.stderr[-2000:]
    *line, actor = out.stdout.split()
    pids = [int(p) for p in line]
    assert int(actor) in pids and len(pids) >= 6, pids  # gcs, raylet, monitors, dashboard, agents, the worker
    deadline = time.monotonic() + 10  # a killed process may wait a moment to be reaped by init
    while (left := [p for p in pids if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, [(p, psutil.Process(p).cmdline()[:3]) for p in left if _alive(p)]
    assert "autoscaler failed" not in out.stderr, out.stderr[-2000:]
