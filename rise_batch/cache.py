"""Node-local caches of what must be a POSIX tree: the structured corpus (hardlinked into workspaces, read by `rg`),
the index (memory-mapped) and the original-text twin, made once per node from object storage.

Each entry is `ROOT/<kind>/<key>/`, where ROOT is the run's `cache_dir` (default `storage.cache_root()`, under the
node's temporary directory) and the key a digest of what the copy is made from (the source's URI without its
credentials, its objects' names and sizes, and the small files that pin its content: an index's meta.json, a
structure run's manifest). So a changed source gets a new entry and an unchanged one is reused, run after run.

Every actor of a node may ask at once; one makes the copy and the others wait for it:
- an entry is made under an exclusive `fcntl.flock` on `ROOT/<kind>/.<key>.lock` (released by the kernel when its
  holder dies, so a killed copy never blocks the next);
- it is filled into a staging directory `ROOT/<kind>/.<key>.staging-<pid>`, checked, given its marker last and
  renamed into place; staging directories the lock holder finds are a killed copy's and are removed, never used;
- the marker (`.rise-batch-cache.json`) records the key and the names and sizes of the entry's small files (all of
  an index, docmap and manifest of a docs tree, with the tree's file count) and a digest over them. An entry is used
  only when its marker is there, names its key and still matches the files (checked on every use, cheaply: the
  bulk trees, corpus/ and original/, are counted when made, not walked on every use).

Pure stdlib; no Ray, no network (the `fill` callables bring those).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from rise_batch.storage import cache_root

MARKER = ".rise-batch-cache.json"
BULK = ("corpus", "original")  # trees counted when made, not re-read on every use


class Cached(NamedTuple):
    """An entry ready for use, and what getting it cost this process."""

    path: Path
    bytes: int  # fetched from the source by this process (0 when it found or waited for a finished copy)
    seconds: float  # spent getting it, waiting for another process's copy included
    reused: bool  # made by an earlier run or another process of this node

    def report(self) -> dict:
        return {"bytes": self.bytes, "seconds": round(self.seconds, 3), "reused": self.reused}


def cache_dir(configured: str | os.PathLike | None = None) -> Path:
    """The cache root: the run's `cache_dir` if given, else storage.cache_root() ($RISE_BATCH_CACHE, default
    <tmp>/rise-batch-cache), evaluated on the node that asks (each node its own temporary directory)."""
    if configured:
        return Path(configured)

    return cache_root()


def key_of(*parts: object) -> str:
    """A cache key: a digest of what an entry is made from (its parts' repr, which must hold no credentials)."""
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:20]


def materialize(root: Path, kind: str, key: str, fill: Callable[[Path], int]) -> Cached:
    """`root/kind/key`, made once by `fill(staging) -> bytes fetched` (which raises if what it fetched is not
    whole) and reused while its marker matches (see the module docstring)."""
    t0 = time.monotonic()
    dest = root / kind / key
    if _verified(dest, key):
        return Cached(dest, 0, time.monotonic() - t0, True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / f".{key}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process of this node copying: wait for it, then use its copy
        if _verified(dest, key):
            return Cached(dest, 0, time.monotonic() - t0, True)
        for old in dest.parent.glob(f".{key}.staging-*"):  # a copy killed before its rename: never used
            shutil.rmtree(old, ignore_errors=True)
        staging = dest.parent / f".{key}.staging-{os.getpid()}"
        staging.mkdir(mode=0o755)
        os.chmod(staging, 0o755)  # readable by the sandbox's uid whatever the umask
        try:
            fetched = fill(staging)
            _write_marker(staging, key)
            if dest.exists():  # an entry without a (matching) marker: an older layout, or damaged
                shutil.rmtree(dest)
            staging.rename(dest)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return Cached(dest, fetched, time.monotonic() - t0, False)


def _small_files(tree: Path) -> tuple[dict[str, int], int]:
    """(relpath -> size of each file outside the bulk trees, number of files inside them)."""
    sizes: dict[str, int] = {}
    bulk = 0
    for dirpath, dirnames, filenames in os.walk(tree):
        rel = os.path.relpath(dirpath, tree)
        top = rel.split(os.sep)[0]
        for name in filenames:
            if top in BULK:
                bulk += 1
            elif not (rel == "." and name == MARKER):
                sizes[os.path.normpath(os.path.join(rel, name))] = os.stat(os.path.join(dirpath, name)).st_size
        dirnames[:] = [d for d in dirnames if not (rel == "." and d.startswith("."))]  # a twin's own staging
    return sizes, bulk


def _digest(key: str, sizes: dict[str, int], bulk: int) -> str:
    return hashlib.sha256(json.dumps([key, sorted(sizes.items()), bulk]).encode()).hexdigest()


def _write_marker(tree: Path, key: str) -> None:
    sizes, bulk = _small_files(tree)
    marker = {"key": key, "files": sizes, "bulk_files": bulk, "digest": _digest(key, sizes, bulk)}
    (tree / MARKER).write_text(json.dumps(marker, sort_keys=True), encoding="utf-8")


def _verified(dest: Path, key: str) -> bool:
    """The entry is finished (its marker, written last, is there), is the one `key` names, and its small files are
    still the sizes they had when it was made."""
    try:
        marker = json.loads((dest / MARKER).read_text(encoding="utf-8"))
        files = marker["files"]
        if marker["key"] != key or marker["digest"] != _digest(key, files, marker["bulk_files"]):
            return False
        return all(os.stat(dest / rel).st_size == size for rel, size in files.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def fetch_objects(src, root: Path, kind: str, marker: str) -> Cached:
    """A verified local copy of the objects under `src` (an ObjectPath: an index to memory-map), keyed by the
    prefix, its objects' names and sizes and the bytes of `marker` (its done marker, e.g. meta.json, which must be
    among them: the source is whole only then). Each file is checked against its listed size."""
    listing = [(str(o.relative_to(src)), n) for o, n in src.list(recursive=True)]
    if marker not in {name for name, _ in listing}:
        raise FileNotFoundError(f"{src}: no {marker} (not written, or not finished)")
    key = key_of(str(src), listing, (src / marker).read_bytes())
    return materialize(root, kind, key, lambda tmp: copy_objects(src, listing, tmp))


def copy_objects(src, listing: list[tuple[str, int]], dest: Path) -> int:
    """The objects (name relative to `src`, listed size) copied under `dest`, each checked against its listed size
    (a copy cut short raises); returns the bytes copied."""
    import pyarrow.fs as pafs

    for name, size in listing:
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        pafs.copy_files((src / name).path, str(target), src.fs, pafs.LocalFileSystem())
        if target.stat().st_size != size:
            raise OSError(f"{src / name}: copied {target.stat().st_size} bytes of {size}")
    return sum(n for _, n in listing)


def same_filesystem(a: Path, b: Path) -> bool:
    """Are `a` and `b` (existing paths) on one file system, so that a file of one can be hardlinked into the other?"""
    return os.stat(a).st_dev == os.stat(b).st_dev
