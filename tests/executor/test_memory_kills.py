"""Ray's memory monitor killing a worker, for real: a private local Ray (in a subprocess, tests/executor/oom_stage.py)
whose monitor fires just above the memory the machine used when it started, and an item that allocates past it.
Ray kills the actor's process and its calls raise OutOfMemoryError, as when another process takes a node's memory.
The items the worker held are redone; an item killed under every try ends the map with one line naming memory,
the node's figures and the remedy (exit 75), never Ray's traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import psutil
import pytest

from rise_batch.errors import EXIT_RETRY
from tests.executor.oom_stage import HOG_BYTES, MARGIN_BYTES

pytestmark = pytest.mark.skipif(
    psutil.virtual_memory().available < 2 * (HOG_BYTES + MARGIN_BYTES), reason="not enough free memory to fill"
)


def oom_stage(*items: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "tests.executor.oom_stage", *items]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def test_the_items_of_a_worker_killed_for_memory_are_redone() -> None:
    done = oom_stage("hog:a", "ok:b")
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["results"]["hog:a"] == {"item": "a", "attempt": 2}  # killed under its first try, done by the second
    assert set(out["results"]) == {"hog:a", "ok:b"}
    assert "worker_replaced" in out["events"]


def test_a_worker_killed_for_memory_every_time_ends_in_one_line() -> None:
    done = oom_stage("always:a")
    assert done.returncode == EXIT_RETRY, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "OutOfMemoryError" not in done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("oom-stage: Ray's memory monitor killed hog workers 3 times (node "), line
    assert "GB used / " in line and "% threshold" in line and "--worker-memory" in line and "re-run" in line
