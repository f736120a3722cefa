"""The node-local cache (rise_batch/cache.py) on real files and real processes: one copy per key however many
processes ask at once, a partial or damaged copy never used, a finished one reused."""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rise_batch.cache import MARKER, CacheRefused, Source, cache_dir, materialize
from rise_batch.storage import cache_root

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
    assert sorted(p.name for p in (root / "docs").iterdir()) == [".k1.lock", ".k1.use", "k1"]  # no staging left


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
    assert sorted(p.name for p in (tmp_path / "index").iterdir()) == [".k3.lock", ".k3.use"]
    calls: list[int] = []
    assert not materialize(tmp_path, "index", "k3", fill_one(calls)).reused and calls == [1]


def test_the_cache_root_is_private_or_refused(tmp_path, monkeypatch):
    fresh = tmp_path / "made" / "cache"
    assert cache_dir(fresh) == fresh and stat.S_IMODE(fresh.stat().st_mode) == 0o700  # made 0700 when missing
    monkeypatch.delenv("RISE_BATCH_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "rise-batch"  # per user, never a shared name in /tmp
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_root() == Path.home() / ".cache" / "rise-batch"
    other = tmp_path / "other"
    other.mkdir()
    (tmp_path / "link").symlink_to(other)
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)
    foreign = tmp_path / "foreign"
    foreign.mkdir(mode=0o755)
    cases = [(tmp_path / "link", "is a symbolic link"), (shared, "is writable by others (mode 0777)")]
    if os.geteuid() == 0:  # only root can give a directory away
        os.chown(foreign, 65534, 65534)
        cases.append((foreign, "is owned by uid 65534"))
    for root, why in cases:
        with pytest.raises(CacheRefused, match=re.escape(why)) as e:
            materialize(root, "docs", "k", fill_one([]))
        assert "\n" not in str(e.value) and str(root) in str(e.value)
    assert not list(other.iterdir()) and not list(shared.iterdir()) and not list(foreign.iterdir())


def test_planted_links_in_the_cache_are_never_followed(tmp_path):
    root, outside = tmp_path / "cache", tmp_path / "outside"
    outside.mkdir()
    (root / "docs").mkdir(parents=True, mode=0o700)
    os.chmod(root, 0o700)
    (root / "docs" / ".k5.lock").symlink_to(outside / "created-by-the-lock")  # a lock planted as a link
    (root / "docs" / ".k5.staging-1").symlink_to(outside)  # a "killed copy" that is a link to elsewhere
    calls: list[int] = []
    got = materialize(root, "docs", "k5", fill_one(calls))
    assert calls == [1] and not got.reused and not list(outside.iterdir())  # nothing created or removed outside
    assert not (root / "docs" / ".k5.lock").is_symlink() and (root / "docs" / ".k5.lock").is_file()
    (root / "index").symlink_to(outside)  # a kind directory that is a link
    with pytest.raises(CacheRefused, match="is a link or not a directory"):
        materialize(root, "index", "k6", fill_one(calls))
    assert not list(outside.iterdir())


def test_an_entry_is_checked_against_its_source_not_its_own_marker(tmp_path):
    def fill(tmp: Path) -> int:
        (tmp / "docids.json").write_text('["a", "b"]')
        (tmp / "meta.json").write_text("{}")
        return 12

    def digest(text: str) -> tuple[str, str]:
        return ("sha256", hashlib.sha256(text.encode()).hexdigest())

    source = Source({"docids.json": 10, "meta.json": 2}, {"meta.json": b"{}"}, {"docids.json": digest('["a", "b"]')})
    got = materialize(tmp_path, "index", "k7", fill, source)
    assert materialize(tmp_path, "index", "k7", fill, source).reused
    (got.path / "docids.json").write_text('["b", "a"]')  # swapped, same size: the entry's marker still matches
    again = materialize(tmp_path, "index", "k7", fill, source)
    assert not again.reused and (got.path / "docids.json").read_text() == '["a", "b"]'  # made again from the source
    forged = tmp_path / "forged"  # the entry replaced by a link to a forged tree (marker and all)
    os.rename(got.path, forged)
    (forged / "docids.json").write_text('["b", "a"]')
    got.path.symlink_to(forged)
    again = materialize(tmp_path, "index", "k7", fill, source)
    assert not again.reused and not got.path.is_symlink() and (got.path / "docids.json").read_text() == '["a", "b"]'
    assert (forged / "docids.json").read_text() == '["b", "a"]'  # the link's target is left alone

    def bad_fill(tmp: Path) -> int:  # a copy that does not match its source is never put in place
        (tmp / "docids.json").write_text('["b", "a"]')
        (tmp / "meta.json").write_text("{}")
        return 12

    with pytest.raises(OSError, match="does not match its source: docids.json does not have the sha256 digest"):
        materialize(tmp_path, "index", "k8", bad_fill, source)
    assert not (tmp_path / "index" / "k8").exists()
