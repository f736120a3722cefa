"""A command cannot change what the sandbox set for it or leave something for the next call: its niceness, the
kernel keyring, the sandbox's own stderr. Each attack runs in the real bubblewrap sandbox, long-lived and one-shot.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import textwrap

import pytest

from rise_batch.space.sandbox import Sandbox
from tests.space.conftest import TEST_LIMITS

AUTOGROUP = "cat /proc/self/autogroup 2>/dev/null || echo no-group"
LIMITS = dataclasses.replace(TEST_LIMITS, timeout_s=30)  # niced calls on a loaded machine: only a hang reaches it


@pytest.mark.parametrize("persistent", [True, False])
def test_a_command_cannot_un_nice_its_session(ws_root, bwrap_ok, persistent):
    """`echo 0 > /proc/self/autogroup` (past the kernel's 100 ms between autogroup changes) is refused, and the next
    call's group is as niced as before."""
    with Sandbox(ws_root, LIMITS, persistent=persistent) as box:
        before = box.run(AUTOGROUP).output
        attack = box.run("sleep 0.2; echo 0 > /proc/self/autogroup && echo CHANGED; " + AUTOGROUP)
        after = box.run(AUTOGROUP).output
    assert "CHANGED" not in attack.output and "Read-only file system" in attack.output, attack.render()
    if before.strip() != "no-group" and persistent:  # one-shot: a group per call, niced best effort from the host
        assert before.rstrip().endswith(f" nice {LIMITS.nice}") and after.split()[-2:] == before.split()[-2:]


KEYRING = """
import dataclasses, json, subprocess, sys
from pathlib import Path
from rise_batch.space.sandbox import Sandbox
from tests.space.conftest import TEST_LIMITS
subprocess.run(["keyctl", "add", "user", "hostkey", "HOSTSECRET", "@s"], check=True, capture_output=True)
with Sandbox(Path(sys.argv[1]), dataclasses.replace(TEST_LIMITS, timeout_s=30), persistent=sys.argv[2] == "1") as box:
    first = box.run("keyctl add user k1 SECRET1 @s; keyctl add user k2 SECRET2 @u; keyctl print %user:hostkey")
    second = box.run("keyctl request user k1; keyctl print %user:k2; keyctl search @u user k2; keyctl show @s")
print(json.dumps([first.output, second.output]))
"""


@pytest.mark.parametrize("persistent", [True, False])
def test_calls_cannot_use_the_kernel_keyring(ws_root, bwrap_ok, persistent):
    """A key added in one call is not there in the next, and the host's session keyring (a login's, with its
    tokens) is not readable from inside: the keyring system calls are denied."""
    if shutil.which("keyctl") is None:
        pytest.skip("keyctl is not installed (Debian: keyutils, see .ci/system-deps)")
    cmd = ["keyctl", "session", "-", sys.executable, "-c", textwrap.dedent(KEYRING), str(ws_root), str(int(persistent))]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    first, second = json.loads(proc.stdout.splitlines()[-1])
    for secret in ("HOSTSECRET", "SECRET1", "SECRET2"):
        assert secret not in first + second, (first, second)
    assert "add_key: Operation not permitted" in first and "request_key: Operation not permitted" in second


def test_signals_to_a_calls_init_fill_nothing(ws_root, bwrap_ok):
    """`kill -INT 1` hits the call's init (Python): it is ignored, and nothing lands in the sandbox's stderr pipe,
    which nobody reads while it runs (its tracebacks filled it after ~254 calls; every later call ran to its cap)."""
    limits = dataclasses.replace(LIMITS, nice=0)
    with Sandbox(ws_root, limits) as box:
        results = [box.run("kill -INT 1; kill -TERM 1; kill -HUP 1; echo alive") for _ in range(300)]
        last = box.run("echo next")
    stuck = [i for i, r in enumerate(results) if r.timed_out or r.output != "alive\n"]
    assert not stuck, (stuck[:5], results[stuck[0]].render())
    assert last.output == "next\n" and last.exit_code == 0
