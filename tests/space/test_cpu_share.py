"""A sandboxed call keeps its CPU share whatever it does: each call runs in a cpu cgroup of its own with the weight
of its niceness, and a process of the call that starts its own session (`setsid`) stays in it.

Before the fix (main at 2ce0c40): a call was niced only through its session's autogroup, so `setsid` inside the
sandbox started a new autogroup of nice 0 (autogroup nice 10 -> 0) and the command got twice the CPU. Checked on
the real sandbox, from the host: the setsid'd process's cpu cgroup and that cgroup's weight (no timing).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from rise_batch.space import bounds
from rise_batch.space.sandbox import Sandbox, SandboxLimits

MARKER = "31.4159"  # `sleep MARKER`: the setsid'd process, found by its command line
WAIT_S = 120  # a hang guard only


def _find_marker() -> int | None:
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if (d / "cmdline").read_bytes().split(b"\0")[:2] == [b"sleep", MARKER.encode()]:
                    return int(d.name)
            except OSError:
                pass
    return None


def _cpu_cgroup(pid: int) -> str:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(",") or (controllers == "" and bounds.host_bounds().cgroup.version == 2):
            return path
    return "/"


@pytest.mark.parametrize("persistent", [False, True], ids=["one-shot", "long-lived"])
def test_setsid_inside_a_call_keeps_the_calls_cpu_weight(ws_root, bwrap_ok, persistent) -> None:
    support = bounds.host_bounds().cgroup
    if not support.ok or support.cpu_parent is None:
        pytest.skip(f"no cpu cgroup for sandboxed calls here: {bounds.host_bounds().describe()}")
    limits = SandboxLimits(timeout_s=WAIT_S, nice=10)
    box = Sandbox(ws_root, limits, persistent=persistent)
    done: dict = {}
    call = threading.Thread(target=lambda: done.setdefault("res", box.run(f"setsid sleep {MARKER} & wait; echo END")))
    call.start()
    try:
        end = time.monotonic() + WAIT_S
        pid = None
        while pid is None and time.monotonic() < end and call.is_alive():
            pid = _find_marker()
            time.sleep(0.05)
        assert pid is not None, done
        session_leader = os.getsid(pid) == pid
        path = _cpu_cgroup(pid)
        assert session_leader  # it did leave the call's session (and so its autogroup)
        assert Path(path).name.startswith(bounds.CGROUP_PREFIX), path  # but not the call's cpu cgroup
        file, value = bounds.cpu_weight(support.version, limits.nice)
        cg = support.cpu_parent / Path(path).name  # per-call cgroups are made right below it
        assert (cg / file).read_text().strip() == value == ("110" if support.version == 1 else "11")
        os.kill(pid, 9)
    finally:
        call.join(WAIT_S)
        box.close()
    assert "END" in done["res"].output
