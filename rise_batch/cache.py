"""Node-local caches of what must be a POSIX tree: the structured corpus (hardlinked into workspaces, read by `rg`),
the index (memory-mapped) and the original-text twin, made once per node from object storage.

Each entry is `ROOT/<kind>/<key>/`, where ROOT is the run's `cache_dir` (default `storage.cache_root()`, the user's
own cache directory) and the key a digest of what the copy is made from (the source's URI without its credentials,
its objects' names and sizes, and the small files that pin its content: an index's meta.json, a structure run's
manifest). So a changed source gets a new entry and an unchanged one is reused, run after run.

ROOT is private (`private_root`): created 0700, refused when it is a link, another user's or writable by others.
Below it nothing is reached through a link: kind directories, locks and staging directories are opened by
descriptor with O_NOFOLLOW, and a link planted in place of an entry is removed, never followed.

Every actor of a node may ask at once; one makes the copy and the others wait for it:
- an entry is made under an exclusive `fcntl.flock` on `ROOT/<kind>/.<key>.lock` (released by the kernel when its
  holder dies, so a killed copy never blocks the next);
- it is filled into a staging directory `ROOT/<kind>/.<key>.staging-<pid>`, checked, given its marker last and
  renamed into place; staging directories the lock holder finds are a killed copy's and are removed, never used;
- the marker (`.rise-batch-cache.json`) records the key, the source's name and the names and sizes of the entry's
  small files (all of an index, docmap and manifest of a docs tree, with the tree's file count) and a digest over
  them. An entry is used only when its marker is there, names its key and still matches the files, and when those
  files match what the source records (`Source`: sizes, pinned files byte for byte, published digests); the bulk
  trees, corpus/ and original/, are counted when made, not walked on every use;
- every process using an entry holds `ROOT/<kind>/.<key>.use` shared until it exits: `cache prune`
  (rise_batch/cache_admin.py) removes only entries whose `.use` it can lock exclusively.

Pure stdlib; no Ray, no network (the `fill` callables bring those).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import shutil
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from rise_batch.errors import ConfigError
from rise_batch.storage import cache_root

log = logging.getLogger(__name__)

MARKER = ".rise-batch-cache.json"
KINDS = ("docs", "index")  # ROOT/<kind>/ of the entries (ROOT/workspaces/ holds runs' workspaces, not entries)
BULK = ("corpus", "original")  # trees counted when made, not re-read on every use


class CacheRefused(ConfigError):
    """A cache directory or entry that is not this user's own (a link, another owner, writable by others)."""


class Cached(NamedTuple):
    """An entry ready for use, and what getting it cost this process."""

    path: Path
    bytes: int  # fetched from the source by this process (0 when it found or waited for a finished copy)
    seconds: float  # spent getting it, waiting for another process's copy included
    reused: bool  # made by an earlier run or another process of this node

    def report(self) -> dict:
        return {"bytes": self.bytes, "seconds": round(self.seconds, 3), "reused": self.reused}


class Source(NamedTuple):
    """What an entry's source records about the files it copies: their sizes, the bytes of the small files that
    pin it (compared whole) and the digests it publishes ((algorithm, hex) per file). An entry is used only while
    its files match these, not only its own marker, which a forger would rewrite along with the files."""

    sizes: dict[str, int]
    exact: dict[str, bytes]
    digests: dict[str, tuple[str, str]]


def cache_dir(configured: str | os.PathLike | None = None) -> Path:
    """The cache root, checked private (`private_root`): the run's `cache_dir` if given, else
    storage.cache_root() ($RISE_BATCH_CACHE, else the user's own cache directory), evaluated on the node that asks."""
    return private_root(Path(configured) if configured else cache_root())


def private_root(root: Path) -> Path:
    """`root`, created 0700 if missing; refused (one line) when it is a symbolic link, not a directory, not owned by
    this user or writable by others, since whoever can write there can plant what the next run trusts."""
    root = Path(os.path.abspath(root))
    if not os.path.lexists(root):
        root.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(root, 0o700)
    st = os.lstat(root)
    uid = os.geteuid()
    if stat.S_ISLNK(st.st_mode):
        why = "is a symbolic link; name the directory it points to, or a new one"
    elif not stat.S_ISDIR(st.st_mode):
        why = "is not a directory; name another --cache-dir"
    elif st.st_uid != uid:
        why = f"is owned by uid {st.st_uid}, not by this user (uid {uid}); name a directory of your own"
    elif st.st_mode & 0o022:
        why = f"is writable by others (mode {stat.S_IMODE(st.st_mode):04o}); `chmod go-w {root}`, or name another"
    else:
        return root
    raise CacheRefused(f"cache directory {root} {why} (--cache-dir DIR; a new one is created 0700)")


def key_of(*parts: object) -> str:
    """A cache key: a digest of what an entry is made from (its parts' repr, which must hold no credentials)."""
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:20]


def _open_dir(name: str | Path, dir_fd: int | None = None, create: bool = False) -> int:
    """A descriptor of the directory `name` (below `dir_fd`), opened without following a link; made 0700 first
    when `create` and missing. A link or a non-directory there is refused."""
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o700, dir_fd=dir_fd)
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise CacheRefused(f"cache directory {name} is a link or not a directory; remove it") from e
        raise


def _open_lock(kind_fd: int, name: str, where: Path) -> int:
    """The lock file, opened without following a link: a link planted in its place is removed, never written
    through; anything but a regular file there is refused."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, 0o600, dir_fd=kind_fd)
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        os.unlink(name, dir_fd=kind_fd)  # the link itself, never its target
        fd = os.open(name, flags | os.O_EXCL, 0o600, dir_fd=kind_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise CacheRefused(f"cache lock {where / name} is not a regular file; remove it")
    return fd


def _remove(dir_fd: int, name: str) -> None:
    """`name` below `dir_fd` removed: a directory with everything in it, a link or a file by itself (a link is
    never followed)."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)


_IN_USE: dict[tuple[str, str], int] = {}  # (kind dir, key) -> the `.use` lock this process holds shared


def materialize(
    root: Path, kind: str, key: str, fill: Callable[[Path], int], source: Source | None = None, label: str = ""
) -> Cached:
    """`root/kind/key`, made once by `fill(staging) -> bytes fetched` (which raises if what it fetched is not
    whole) and reused while its marker and its `source` match (see the module docstring). `label` names the source
    in the marker (for `cache list`; no credentials). This process then holds the entry's `.use` lock shared until
    it exits, so `cache prune` never removes an entry a run is using, and the marker's time says when it was used."""
    t0 = time.monotonic()
    root = private_root(root)
    where = root / kind
    dest = where / key
    root_fd = _open_dir(root)
    try:
        kind_fd = _open_dir(kind, root_fd, create=True)
    finally:
        os.close(root_fd)
    try:
        _hold(kind_fd, where, key)  # before looking: a prune holding it exclusively is done before we look
        fetched, reused = 0, _verified(kind_fd, dest, key, source)
        if not reused:
            lock = _open_lock(kind_fd, f".{key}.lock", where)
            try:
                fcntl.flock(lock, fcntl.LOCK_EX)  # another process of this node copying: wait, then use its copy
                reused = _verified(kind_fd, dest, key, source)
                if not reused:
                    fetched = _make(kind_fd, where, key, fill, source, label)
            finally:
                os.close(lock)
    finally:
        os.close(kind_fd)
    with contextlib.suppress(OSError):
        os.utime(dest / MARKER)  # its last use, for `cache list` and `cache prune --older-than`
    return Cached(dest, fetched, time.monotonic() - t0, reused)


def _hold(kind_fd: int, where: Path, key: str) -> None:
    """Take the entry's `.use` lock shared, once per process, kept until it exits (the kernel drops it then)."""
    if (str(where), key) in _IN_USE:
        return
    fd = _open_lock(kind_fd, f".{key}.use", where)
    fcntl.flock(fd, fcntl.LOCK_SH)
    _IN_USE[(str(where), key)] = fd


def _make(kind_fd: int, where: Path, key: str, fill: Callable[[Path], int], source: Source | None, label: str) -> int:
    """Fill a new staging directory, check it against its source, mark it and rename it into place (we hold the
    lock). Staging directories left by a killed copy are removed, never used."""
    for old in os.listdir(kind_fd):
        if old.startswith(f".{key}.staging-"):
            _remove(kind_fd, old)
    name = f".{key}.staging-{os.getpid()}"
    os.mkdir(name, 0o755, dir_fd=kind_fd)
    try:
        fd = _open_dir(name, kind_fd)
        try:
            os.fchmod(fd, 0o755)  # readable by the sandbox's uid whatever the umask
        finally:
            os.close(fd)
        staging = where / name
        fetched = fill(staging)
        problem = _source_problem(staging, key, source)
        if problem:
            raise OSError(f"{staging}: the copy does not match its source: {problem}")
        _write_marker(staging, key, label)
        _remove(kind_fd, key)  # an entry without a (matching) marker, or not its source's: never used
        os.rename(name, key, src_dir_fd=kind_fd, dst_dir_fd=kind_fd)
    finally:
        _remove(kind_fd, name)
    return fetched


def _small_files(tree: Path) -> tuple[dict[str, int], int]:
    """(relpath -> size of each file outside the bulk trees, number of files inside them). Every entry is taken as
    it is (lstat): a link or a special file anywhere in the small files makes the tree unusable (OSError)."""
    sizes: dict[str, int] = {}
    bulk = 0
    for dirpath, dirnames, filenames in os.walk(tree):
        rel = os.path.relpath(dirpath, tree)
        top = rel.split(os.sep)[0]
        for name in filenames:
            if top in BULK:
                bulk += 1
            elif not (rel == "." and name == MARKER):
                st = os.lstat(os.path.join(dirpath, name))
                if not stat.S_ISREG(st.st_mode):
                    raise OSError(f"{os.path.join(dirpath, name)}: not a regular file")
                sizes[os.path.normpath(os.path.join(rel, name))] = st.st_size
        if rel == ".":  # a twin's own staging; a link in place of a directory is a file to os.walk
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
    return sizes, bulk


def _digest(key: str, sizes: dict[str, int], bulk: int) -> str:
    return hashlib.sha256(json.dumps([key, sorted(sizes.items()), bulk]).encode()).hexdigest()


def _write_marker(tree: Path, key: str, label: str = "") -> None:
    sizes, bulk = _small_files(tree)
    marker = {"key": key, "files": sizes, "bulk_files": bulk, "digest": _digest(key, sizes, bulk), "source": label}
    (tree / MARKER).write_text(json.dumps(marker, sort_keys=True), encoding="utf-8")


def _verified(kind_fd: int, dest: Path, key: str, source: Source | None) -> bool:
    """The entry is a directory of its own (a link in its place is not used), finished (its marker, written last, is
    there), the one `key` names, its small files still the sizes they had when it was made, and they match what
    its source records (`_source_problem`). A mismatch with the source is said once, and the entry rebuilt."""
    try:
        if not stat.S_ISDIR(os.stat(key, dir_fd=kind_fd, follow_symlinks=False).st_mode):
            return False
        marker = json.loads((dest / MARKER).read_text(encoding="utf-8"))
        files = marker["files"]
        if marker["key"] != key or marker["digest"] != _digest(key, files, marker["bulk_files"]):
            return False
        if not _files_match(dest, files):
            return False
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
    problem = _source_problem(dest, key, source)
    if problem:
        log.warning("cache entry %s does not match its source (%s): made again", dest, problem)
    return not problem


def _files_match(tree: Path, files: dict[str, int]) -> bool:
    """Each of `files` (relpath -> size) is a regular file of that size below `tree`, reached through real
    directories only (no link on the way); the bulk trees are not walked."""
    dirs: dict[str, bool] = {}
    for rel, size in files.items():
        parts = Path(rel).parts
        for i in range(1, len(parts)):
            d = os.path.join(*parts[:i])
            if d not in dirs:
                dirs[d] = stat.S_ISDIR(os.lstat(tree / d).st_mode)
            if not dirs[d]:
                return False
        st = os.lstat(tree / rel)
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            return False
    return True


_CHECKED: set[tuple] = set()  # (key, the files' identities) whose digests this process checked already


def _source_problem(tree: Path, key: str, source: Source | None) -> str:
    """Why the files of `tree` are not what `source` records ("" when they are): a listed file missing, not a
    regular file, of another size, other bytes than a pinned one, or another digest than the published one.
    Digests are computed once per process per unchanged set of files (same inodes, sizes and change times)."""
    if source is None:
        return ""
    ident = [key]
    for rel, size in sorted(source.sizes.items()):
        try:
            st = os.lstat(tree / rel)
        except OSError:
            return f"{rel} is missing"
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            return f"{rel} is not the source's {size}-byte file"
        ident.append((rel, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    for rel, data in source.exact.items():
        if (tree / rel).read_bytes() != data:
            return f"{rel} differs from the source's"
    if tuple(ident) in _CHECKED:
        return ""
    for rel, (algorithm, hexdigest) in sorted(source.digests.items()):
        if _file_digest(tree / rel, algorithm) != hexdigest:
            return f"{rel} does not have the {algorithm} digest its source records"
    _CHECKED.add(tuple(ident))
    return ""


def _file_digest(path: Path, algorithm: str) -> str:
    h = hashlib.blake2b(digest_size=16) if algorithm == "blake2b" else hashlib.new(algorithm)
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def same_filesystem(a: Path, b: Path) -> bool:
    """Are `a` and `b` (existing paths) on one file system, so that a file of one can be hardlinked into the other?"""
    return os.stat(a).st_dev == os.stat(b).st_dev
