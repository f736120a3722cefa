"""What is in a node-local cache (rise_batch/cache.py) and removing what is no longer wanted, safely beside runs.

An entry is in use while some process holds its `.use` lock (every process that uses an entry holds it shared until
it exits). `prune` removes an entry only while it holds that lock exclusively (taken without waiting, so an entry in
use is skipped, never waited for) and the entry's build lock too, so no run starts using or making it meanwhile; a
run that asks for it afterwards makes it again. A staging directory a killed copy left is removed the same way.

Pure stdlib; no Ray, no network.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from rise_batch.cache import KINDS, MARKER, private_root


class Entry(NamedTuple):
    """One entry of the cache, as `cache list` shows it."""

    kind: str  # docs or index
    key: str  # its directory's name (a staging directory's own name for a killed copy's leftovers)
    path: Path
    source: str  # what it was made from ("" when unknown: no or an unreadable marker)
    bytes: int  # apparent size of its files (hardlinks into workspaces counted here)
    last_use: float  # epoch seconds: its marker's time, touched on every use
    holders: tuple[int, ...]  # pids holding its `.use` lock (in use when `in_use`)
    in_use: bool
    finished: bool  # False: a staging directory or an entry without its marker (never used)

    def to_json(self) -> dict:
        d = self._asdict()
        return d | {"path": str(self.path), "holders": list(self.holders)}


def tree_bytes(path: Path) -> int:
    """Apparent size of the files under `path` (links not followed)."""
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def _lock_holders(lock: Path) -> tuple[int, ...]:
    """Pids holding a flock on `lock` (from /proc/locks; empty where it is not readable)."""
    try:
        ino = os.stat(lock).st_ino
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return ()
    pids = []
    for line in lines:
        f = line.split()
        if len(f) >= 6 and f[1] == "FLOCK" and f[5].rsplit(":", 1)[-1] == str(ino):
            pids.append(int(f[4]))
    return tuple(sorted(set(pids)))


@contextlib.contextmanager
def _exclusive(lock: Path) -> Iterator[bool]:
    """Try `lock` exclusively without waiting (created if missing, never through a link); yields whether we got it."""
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def _key_of(name: str) -> str:
    return name[1:].split(".staging-")[0] if ".staging-" in name else name


def entries(root: Path) -> list[Entry]:
    """Every entry and leftover staging directory under the cache `root`, oldest use first."""
    if not os.path.lexists(root):
        return []
    root = private_root(root)
    out = []
    for kind in KINDS:
        where = root / kind
        if not where.is_dir() or where.is_symlink():
            continue
        for p in sorted(where.iterdir()):
            if not stat.S_ISDIR(os.lstat(p).st_mode) or (p.name.startswith(".") and ".staging-" not in p.name):
                continue
            out.append(_entry(kind, p))
    return sorted(out, key=lambda e: e.last_use)


def _entry(kind: str, p: Path) -> Entry:
    key = _key_of(p.name)
    use = p.parent / f".{key}.use"
    source, finished = "", False
    try:
        marker = json.loads((p / MARKER).read_text(encoding="utf-8"))
        source, finished = str(marker.get("source") or ""), marker.get("key") == key and not p.name.startswith(".")
        last = os.stat(p / MARKER).st_mtime
    except (OSError, ValueError, AttributeError):
        last = os.lstat(p).st_mtime
    if p.name.startswith("."):  # a staging directory: in use while its maker holds the build lock
        holders = _lock_holders(p.parent / f".{key}.lock")
    else:
        holders = _lock_holders(use) if use.exists() else ()
    with _exclusive(p.parent / f".{key}.lock" if p.name.startswith(".") else use) as free:
        in_use = not free
    return Entry(kind, p.name, p, source, tree_bytes(p), last, holders, in_use, finished)


class Pruned(NamedTuple):
    removed: list[Entry]
    kept_in_use: list[Entry]  # would have been removed, but a run holds them

    @property
    def freed(self) -> int:
        return sum(e.bytes for e in self.removed)


def prune(
    root: Path,
    older_than_s: float | None = None,
    max_bytes: int | None = None,
    unused: bool = False,
    dry_run: bool = False,
) -> Pruned:
    """Remove what is asked, never an entry in use: entries last used more than `older_than_s` ago; the least
    recently used ones until what is left is at most `max_bytes`; with `unused`, every entry no run holds.
    Leftover staging directories (a killed copy's) go whatever is asked. `dry_run` says what would go."""
    now = time.time()
    all_entries = entries(root)
    chosen: list[Entry] = [e for e in all_entries if not e.finished]
    if unused:
        chosen += [e for e in all_entries if e.finished and not e.in_use]
    if older_than_s is not None:
        chosen += [e for e in all_entries if e.finished and now - e.last_use > older_than_s]
    if max_bytes is not None:
        total = sum(e.bytes for e in all_entries)
        for e in all_entries:  # oldest use first
            if total <= max_bytes:
                break
            if e.finished and not e.in_use:
                chosen.append(e)
                total -= e.bytes
    removed, kept = [], []
    for e in dict.fromkeys(chosen):
        if dry_run and not e.in_use:
            removed.append(e)
        elif dry_run or not _remove_entry(e):
            kept.append(e)
        else:
            removed.append(e)
    return Pruned(removed, kept)


def _remove_entry(e: Entry) -> bool:
    """Remove `e` while holding its `.use` and build locks exclusively (False: a run holds one of them)."""
    key = _key_of(e.key)
    with _exclusive(e.path.parent / f".{key}.use") as free, _exclusive(e.path.parent / f".{key}.lock") as idle:
        if not (free and idle):
            return False
        if e.path.is_symlink():
            e.path.unlink()
        else:
            shutil.rmtree(e.path)
        return True
