"""The node-local cache (rise_batch/cache.py) on real files and real processes: one copy per key however many
processes ask at once, a partial or damaged copy never used, a finished one reused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rise_batch.cache import MARKER, materialize

# A process that materializes KEY under ROOT with a fill that records its pid, says it started, and waits for a
# release file: the test holds it mid-copy while a second process asks for the same key.
ASK = """
import json, os, sys, time
from pathlib import Path
from rise_batch.cache import materialize
root, log, release = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
def fill(tmp):
    with open(log, "a") as f:
        f.write(f"{os.getpid()}\\n")
    while not release.exists():
        time.sleep(0.05)
    (tmp / "docmap.parquet").write_bytes(b"x" * 100)
    (tmp / "corpus" / "a").mkdir(parents=True)
    (tmp / "corpus" / "a" / "1.txt").write_text("one")
    return 103
print("asking", flush=True)
got = materialize(root, "docs", "k1", fill)
print(json.dumps({"path": str(got.path), "bytes": got.bytes, "reused": got.reused}), flush=True)
"""


def ask(root: Path, log: Path, release: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", ASK, str(root), str(log), str(release)], stdout=subprocess.PIPE,
                            text=True, env=os.environ)  # fmt: skip


def wait_until(cond, what: str, timeout: float = 300) -> None:  # only a hang reaches it
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def blocked_on_flock(path: Path) -> bool:
    """Is some process waiting for a flock on `path` (a `->` line of /proc/locks naming its inode)?"""
    st = os.stat(path)
    ino = f":{st.st_ino} "
    return any(line.split()[1] == "->" and ino in line for line in Path("/proc/locks").read_text().splitlines())


def test_two_processes_asking_at_once_make_one_copy(tmp_path):
    root, log, release = tmp_path / "cache", tmp_path / "fills.log", tmp_path / "release"
    first = ask(root, log, release)
    wait_until(log.exists, "the first process to start its copy")
    second = ask(root, log, release)
    assert second.stdout.readline().strip() == "asking"
    wait_until(lambda: blocked_on_flock(root / "docs" / ".k1.lock"), "the second process to wait for the lock")
    release.touch()
    a, b = (json.loads(p.communicate(timeout=60)[0].splitlines()[-1]) for p in (first, second))
    assert first.returncode == second.returncode == 0
    assert log.read_text().split() == [str(first.pid)]  # one copy made, by the first
    assert a["path"] == b["path"] and not a["reused"] and b["reused"] and (a["bytes"], b["bytes"]) == (103, 0)
    assert sorted(p.name for p in (root / "docs").iterdir()) == [".k1.lock", "k1"]  # no staging left


def fill_one(calls: list[int]):
    def fill(tmp: Path) -> int:
        calls.append(1)
        (tmp / "docmap.parquet").write_bytes(b"d" * 10)
        (tmp / "corpus").mkdir()
        (tmp / "corpus" / "x.txt").write_text("x")
        return 11

    return fill


def test_a_partial_copy_is_never_used_and_a_finished_one_is_reused(tmp_path):
    calls: list[int] = []
    kind = tmp_path / "docs"
    staging = kind / ".k2.staging-4242"  # a copy killed before its rename
    (staging / "corpus").mkdir(parents=True)
    (staging / "docmap.parquet").write_bytes(b"partial")
    (kind / "k2" / "corpus").mkdir(parents=True)  # an entry without its marker (written last): not finished
    got = materialize(tmp_path, "docs", "k2", fill_one(calls))
    assert calls == [1] and not got.reused and got.bytes == 11
    assert not staging.exists() and (got.path / MARKER).is_file()
    assert (got.path / "docmap.parquet").read_bytes() == b"d" * 10
    again = materialize(tmp_path, "docs", "k2", fill_one(calls))
    assert calls == [1] and again.reused and again.bytes == 0 and again.path == got.path
    (got.path / "docmap.parquet").write_bytes(b"short")  # damaged since: its size no longer the recorded one
    materialize(tmp_path, "docs", "k2", fill_one(calls))
    assert calls == [1, 1] and (got.path / "docmap.parquet").read_bytes() == b"d" * 10


def test_a_failed_copy_leaves_nothing_and_the_next_ask_makes_it(tmp_path):
    def broken(tmp: Path) -> int:
        (tmp / "docmap.parquet").write_bytes(b"half")
        raise OSError("the source went away")

    with pytest.raises(OSError, match="went away"):
        materialize(tmp_path, "index", "k3", broken)
    assert [p.name for p in (tmp_path / "index").iterdir()] == [".k3.lock"]
    calls: list[int] = []
    assert not materialize(tmp_path, "index", "k3", fill_one(calls)).reused and calls == [1]
