"""A local Ray started by a command runs its actors at the command's own niceness, not Ray's default +15.

Ray starts workers at niceness 15 (RAY_worker_niceness), so on a busy machine `run --workers 2` and
`structure --workers 2` starved beside any other process while `--workers 0` did not (issue 14: 74-81 s against
11 s). `ray job submit` already runs its jobs at 0; a local Ray we start should too. Measured in a real subprocess
that starts its own Ray (own RAY_TMPDIR) through executor.ray.init_ray, as the commands do.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

pytestmark = pytest.mark.slow

PROBE = """
import os, ray
from rise_batch.executor.ray import init_ray

init_ray(None)

@ray.remote
class Probe:
    def nice(self):
        return os.nice(0)

print(os.nice(0), ray.get(Probe.remote().nice.remote()))
ray.shutdown()
"""


def run_with_own_ray(code: str) -> subprocess.CompletedProcess:
    """`python -c code` with no RAY_* variables and its own RAY_TMPDIR: a local Ray of its own, as a command's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    with tempfile.TemporaryDirectory(prefix="rnice", dir="/tmp") as tmp:  # short: Ray's socket paths live under it
        env["RAY_TMPDIR"] = tmp
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=240)


def test_local_ray_actors_run_at_the_commands_niceness() -> None:
    out = run_with_own_ray(PROBE)
    assert out.returncode == 0, out.stderr[-2000:]
    driver, actor = map(int, out.stdout.split()[-2:])
    assert actor == driver, f"actor niceness {actor}, driver {driver}: Ray's workers start deprioritised"
