"""The long-lived sandbox (one bubblewrap per workspace, each command in its own namespaces inside it) isolates calls
from each other as a bubblewrap per call did (what it saves per call: `python bench/workspace.py --sandbox-only`).

Everything runs the real bubblewrap and the real supervisor; the escape table (test_security.py) and the bounds
tests (test_call_bounds.py) run through the same long-lived sandbox, since it is the default.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import signal
import time

import pytest

from rise_batch.errors import ConfigError
from rise_batch.space.sandbox import Sandbox
from tests.space.conftest import TEST_LIMITS
from tests.space.test_security import TOKEN, _alive_with_token, _gone_eventually


@pytest.fixture
def box(ws_root, bwrap_ok):
    (ws_root / "a.txt").write_text("hello\n")
    os.chmod(ws_root / "a.txt", 0o644)
    with Sandbox(ws_root, TEST_LIMITS) as sandbox:
        yield sandbox


def _namespaces(box: Sandbox) -> dict[str, str]:
    res = box.run("for n in user net pid mnt ipc; do echo $n $(readlink /proc/self/ns/$n); done")
    assert res.exit_code == 0, res.render()
    return dict(line.split(" ", 1) for line in res.output.splitlines())


def test_calls_share_one_sandbox(box):
    """One bubblewrap (same user and network namespace) for the workspace; pid 1 of each call is its own init."""
    first, second = _namespaces(box), _namespaces(box)
    assert first["user"] == second["user"] and first["net"] == second["net"], (first, second)
    assert box.run("cat /proc/1/comm").output == "python3\n"


def test_a_call_cannot_see_or_outlive_into_the_next(box):
    """A daemon left by one call dies with it; the next call sees only its own processes, a fresh /tmp and IPC."""
    res = box.run(f"(setsid bash -c 'exec -a {TOKEN} sleep 1000' &); ipcmk -M 4096 >/dev/null; touch /tmp/x; echo ok")
    assert res.exit_code == 0 and res.output.strip() == "ok", res.render()
    assert _gone_eventually(), f"a process of an ended call is still running: {_alive_with_token()}"
    procs = box.run("ps -e -o pid=,comm=").output.split()
    assert procs == ["1", "python3", "2", "ps"], procs  # the call's init and the command (bash execs ps)
    assert box.run("ls -A /tmp /dev/shm").output == "/dev/shm:\n\n/tmp:\n"
    assert "0x" not in box.run("ipcs -m").output


def test_a_call_cannot_reach_the_supervisor(box):
    """`kill -9 -1`, ptrace and /proc of pid 1 from a call leave the sandbox working for the next one."""
    attack = (
        "kill -9 -1; kill -9 1; cat /proc/1/environ /proc/1/fd/* 2>&1 | head -c 300; "
        "python3 -c \"import ctypes; print('ptrace', ctypes.CDLL(None).ptrace(16, 1, 0, 0))\"; echo STILL"
    )
    res = box.run(attack)
    assert "ptrace -1" in res.output and "STILL" in res.output, res.render()
    assert "Permission denied" in res.output, res.render()
    again = box.run("cat a.txt")
    assert again.output == "hello\n" and again.exit_code == 0, again.render()


def test_commands_get_the_same_privileges_and_limits_as_a_one_shot_sandbox(box, ws_root):
    probe = "grep -e ^Cap -e NoNewPrivs -e Seccomp: /proc/self/status; ulimit -H -a; id; umask; env | sort; pwd"
    with Sandbox(ws_root, TEST_LIMITS, persistent=False) as one_shot:
        expected = one_shot.run(probe)
    got = box.run(probe)
    assert expected.exit_code == 0 and got.exit_code == 0, (expected.render(), got.render())
    want = [line for line in expected.output.splitlines() if not line.startswith("NoNewPrivs")]
    have = [line for line in got.output.splitlines() if not line.startswith("NoNewPrivs")]
    assert have == want
    assert "CapBnd:\t0000000000000000" in got.output and "NoNewPrivs:\t1" in got.output


def test_time_cap_kills_the_call_and_the_sandbox_goes_on(box):
    res = box.run(f"bash -c 'exec -a {TOKEN} sleep 1000' & (setsid bash -c 'exec -a {TOKEN}b sleep 1000' &); wait")
    assert res.timed_out and res.exit_code is None, res.render()
    assert _gone_eventually(), _alive_with_token()
    assert box.run("echo next").output == "next\n"


def test_a_killed_or_idle_sandbox_is_started_again(box):
    assert box.run("true").exit_code == 0
    session = box._session
    assert session is not None
    os.killpg(session.proc.pid, signal.SIGKILL)
    session.proc.wait()
    res = box.run("cat a.txt", dataclasses.replace(TEST_LIMITS, timeout_s=30))  # the restart is inside the cap:
    assert res.output == "hello\n" and res.exit_code == 0, res.render()  # over 2 s on a loaded machine
    assert box._session is not session and box._session.alive


def test_close_leaves_no_process_and_no_cgroup(box):
    assert box.run("true").exit_code == 0
    session = box._session
    cgroup = session.cgroup.path if session.cgroup else None
    box.close()
    assert session.proc.poll() is not None
    assert cgroup is None or not cgroup.exists()


def test_a_dropped_sandbox_is_still_ended(ws_root, bwrap_ok):
    """A sandbox nobody closed (a reference cycle the collector frees) ends all the same, in the session reaper's
    thread rather than in the one the collection ran in: its bwrap exits and its cgroup goes."""
    (ws_root / "a.txt").write_text("hello\n")
    box = Sandbox(ws_root, TEST_LIMITS)
    assert box.run("cat a.txt").output == "hello\n"
    session = box._session
    cgroup = session.cgroup.path if session.cgroup else None
    box.itself = box  # only the garbage collector can free it now
    del box
    gc.collect()
    end = time.monotonic() + 60  # bounded wait, not a timing assertion: bwrap's exit on a loaded machine
    while (session.proc.poll() is None or session.sock is not None) and time.monotonic() < end:
        time.sleep(0.05)
    assert session.proc.poll() is not None and session.sock is None
    while cgroup is not None and cgroup.exists() and time.monotonic() < end:
        time.sleep(0.05)
    assert cgroup is None or not cgroup.exists()


def test_many_calls_share_one_sandbox_and_one_shot_calls_do_not(box, ws_root):
    """What makes a call cheap (its cost against a bubblewrap per call is measured by `bench/workspace.py
    --sandbox-only`, not asserted here): every call of a long-lived sandbox runs in the same bubblewrap, while
    each one-shot call gets its own (its own user namespace)."""
    box.run("true")
    session = box._session
    users = {_namespaces(box)["user"] for _ in range(15)}
    assert len(users) == 1 and box._session is session and session.proc.poll() is None
    with Sandbox(ws_root, TEST_LIMITS, persistent=False) as one_shot:
        assert len({_namespaces(one_shot)["user"] for _ in range(3)}) == 3


NICE_PROBE = "read -a s < /proc/self/stat; echo nice ${s[18]}; cat /proc/self/autogroup 2>/dev/null || echo no-group"


@pytest.mark.parametrize("persistent", [True, False])
def test_commands_yield_the_cpu_to_the_harness(ws_root, bwrap_ok, persistent):
    """An agent's command runs at the limits' niceness above the harness's, and so does its session's autogroup (the
    group the kernel weighs it in where autogroups apply): on a loaded machine the harness's search and model calls
    are not starved by `rg`. nice=0 leaves both as they were."""
    base = os.nice(0)
    for nice, want in ((10, min(19, base + 10)), (0, base)):
        limits = dataclasses.replace(TEST_LIMITS, nice=nice)
        with Sandbox(ws_root, limits, persistent=persistent) as box:
            res = box.run(NICE_PROBE)
        assert res.exit_code == 0, res.render()
        first, group = res.output.splitlines()
        assert first == f"nice {want}", (nice, res.output)
        if group != "no-group" and persistent:  # a one-shot sandbox tries once (the kernel allows an unprivileged
            # autogroup change every 100 ms machine-wide); the long-lived one retries, once per sandbox
            assert group.endswith(f" nice {nice}"), (nice, res.output)


def test_the_niceness_is_checked():
    for bad in (-1, 20, 2.5, True):
        with pytest.raises(ConfigError, match="nice must be a whole number from 0 to 19"):
            dataclasses.replace(TEST_LIMITS, nice=bad)
