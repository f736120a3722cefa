"""The sandbox bounds a call as a whole: total memory (cgroup), /tmp's inodes, what /proc shows, what output counts.

Each attack runs in the real bubblewrap sandbox with small limits, so every test takes seconds. The memory test
needs a cgroup this process may create children in (root, or a delegated cgroup v2 subtree); where there is none,
it is skipped with the one-line reason the sandbox also logs at start-up.
"""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
import unicodedata

import pytest

from rise_batch.errors import ConfigError
from rise_batch.space.bounds import host_bounds
from rise_batch.space.sandbox import Sandbox, SandboxLimits
from tests.space.conftest import TEST_LIMITS


@pytest.fixture
def box(ws_root, bwrap_ok) -> Sandbox:
    (ws_root / "a.txt").write_text("hello\n")
    os.chmod(ws_root / "a.txt", 0o644)
    return Sandbox(ws_root, TEST_LIMITS)


def _need_isolation(box: Sandbox) -> None:
    if not box.isolated:
        pytest.skip(f"no private mount namespace for the sandbox here: {box.bounds_line}")


def test_memory_is_bounded_for_the_call_as_a_whole(box):
    """/tmp and one allocation each fit their own per-process limits; together they pass the call's memory cap."""
    if not host_bounds().cgroup.ok:
        pytest.skip(f"no cgroup to bound a call's memory here: {host_bounds().cgroup.reason}")
    limits = dataclasses.replace(
        TEST_LIMITS, timeout_s=20, memory_bytes=192 << 20, tmp_bytes=256 << 20, max_file_bytes=256 << 20
    )
    hog = "head -c 150M /dev/zero > /tmp/big && echo WROTE; python3 -c \"b = b'x' * (120 << 20); print('ALLOCATED')\""
    res = box.run(hog, limits)
    assert "WROTE" in res.output, res.render()  # the tmpfs alone is within bounds
    assert "ALLOCATED" not in res.output, res.render()  # 150 MB held in /tmp + 120 MB allocated > 192 MB
    assert res.memory_exceeded and "memory limit" in res.render()
    alone = box.run("python3 -c \"b = b'x' * (120 << 20); print('ALLOCATED')\"", limits)
    assert "ALLOCATED" in alone.output and not alone.memory_exceeded  # the cap is per call, not cumulative


# what an inode test bounds is the count, not the time: 5,000 touches in the call's CPU cgroup (its share set by
# the niceness) took over the 2 s default beside a loaded machine's other work, and the answer was cut
SLOW_OK = dataclasses.replace(TEST_LIMITS, timeout_s=30)


def test_tmp_inodes_are_bounded(box):
    _need_isolation(box)
    res = box.run("cd /tmp && seq 1 5000 | xargs touch 2>&1 | tail -1; ls /tmp | wc -l", SLOW_OK)
    last = res.output.strip().splitlines()
    assert "No space left on device" in res.output, res.render()
    assert int(last[-1]) <= TEST_LIMITS.tmp_inodes


def test_dev_shm_inodes_are_bounded(box):
    _need_isolation(box)
    res = box.run("cd /dev/shm && seq 1 5000 | xargs touch 2>&1 | tail -1; ls /dev/shm | wc -l", SLOW_OK)
    assert int(res.output.strip().splitlines()[-1]) <= TEST_LIMITS.tmp_inodes, res.render()


def test_no_host_path_in_mountinfo(box, ws_root):
    _need_isolation(box)
    res = box.run("cat /proc/self/mountinfo /proc/1/mountinfo /proc/self/mounts; cat /proc/1/cmdline | tr '\\0' ' '")
    assert "/workspace" in res.output and res.exit_code == 0, res.render()
    host = ws_root.resolve()
    assert str(host) not in res.output and host.name not in res.output, f"host path visible:\n{res.output}"
    assert "rise-sandbox-" not in res.output  # nor the host side's staging directory
    assert box.run("ls /workspace; echo x > /workspace/b.txt").output.startswith("a.txt\n")
    assert not (ws_root / "b.txt").exists()


def test_no_host_directory_reachable_through_an_inherited_fd(box):
    _need_isolation(box)
    res = box.run("ls -l /proc/self/fd/ | grep -v -e pipe -e /dev/null -e 'total' -e '/proc/' || echo CLEAN")
    assert res.output.strip().endswith("CLEAN"), res.render()


def _visible(chars: str) -> str:
    """The text a terminal-free reader should see: no control characters but newline, tab and carriage return."""
    return "".join(c for c in chars if c in "\n\t\r" or unicodedata.category(c) != "Cc")


def test_binary_output_is_counted_as_the_characters_it_decodes_to(box):
    data = bytes(range(32, 256)) * 300  # no escape sequences: printable ASCII, then bytes that are not UTF-8
    res = box.run('python3 -c "import sys; sys.stdout.buffer.write(bytes(range(32, 256)) * 300)"')
    total = len(_visible(data.decode("utf-8", errors="replace")))
    assert len(res.output) == TEST_LIMITS.max_output_chars
    assert res.output == _visible(data.decode("utf-8", errors="replace"))[: TEST_LIMITS.max_output_chars]
    assert res.cut_chars == total - TEST_LIMITS.max_output_chars


def test_terminal_escape_codes_are_stripped_and_not_counted(box):
    res = box.run(r"printf '\033[1;31mRED\033[0m \033]0;title\007done\033(B\a\b\n'")
    assert res.output == "RED done\n", repr(res.output)
    long = box.run("python3 -c \"print('\\033[1m' + 'x' * 5000 + '\\033[0m')\"")
    assert long.output == "x" * 4000 and long.cut_chars == 1001  # 1,000 x and the newline; no escape counted


def test_escape_split_across_reads_is_stripped(box):
    cmd = (
        'python3 -c "import sys, time; w = sys.stdout.write; '
        "w('a\\033[3'); sys.stdout.flush(); time.sleep(0.3); w('1mb\\n')\""
    )
    assert box.run(cmd).output == "ab\n"


@pytest.mark.parametrize(
    "field,value",
    [
        ("timeout_s", math.nan),
        ("timeout_s", math.inf),
        ("timeout_s", -1.0),
        ("timeout_s", 0.0),
        ("max_output_chars", -5),
        ("max_output_chars", 0),
        ("max_output_chars", 2.5),
        ("memory_bytes", 0),
        ("tmp_inodes", -1),
    ],
)
def test_bad_limits_are_refused(field, value):
    with pytest.raises(ConfigError, match=field):
        SandboxLimits(**{field: value})


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--timeout", "nan"], "--timeout"),
        (["--timeout", "inf"], "--timeout"),
        (["--timeout", "-1"], "--timeout"),
        (["--max-output", "-5"], "--max-output"),
        (["--max-output", "0"], "--max-output"),
    ],
)
def test_workspace_bash_refuses_bad_limits(tmp_path, flags, message):
    ws = tmp_path / "ws"
    (ws / "files").mkdir(parents=True)
    (ws / "manifest.jsonl").write_text("")
    proc = subprocess.run(
        [sys.executable, "-m", "rise_batch.cli", "workspace", "bash", str(ws), "true", *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rise-batch workspace bash: error:") and message in lines[0], lines
