"""A query's interaction space: a directory that only `search` adds to, by hardlinking corpus files into it.

Hardlinks make a 3,000-document workspace cost a few milliseconds and no disk, and keep the corpus-relative paths
the agent sees in `rg` output identical to the corpus's. Each document is opened below DOCS/corpus without
following links and must be a regular file (space/safe_open.py); the link is made from that open file, so a
symlink, a FIFO or a device in a shared docs dir is refused (one line naming it) and never reaches the agent. Once a
directory is open on both sides (below DOCS/corpus, reached the same way, and below files/), its next documents are
linked by name between the two without following a final link, and the new name must be a regular file (a link or a
FIFO linked as itself is removed at once and takes the way above): 2 system calls a document instead of 4. Where
a hardlink is impossible (workspace on another file system, the kernel's protected_hardlinks refusing a file we do
not own, a file at the hardlink limit) we copy from the open file instead, and say so once.
The manifest (docid -> which search call and when) lives next to the files, not among them, so the agent never
greps it; every file placed gets its line, even when the call fails half-way.

A workspace is the engine's own: it is created with a marker file, and a directory without one is refused, never
written into. Inside it nothing is resolved by path: each parent directory below files/ is opened one component at
a time with O_NOFOLLOW|O_DIRECTORY (created with mkdirat where missing), and links, copies and unlinks are made by
name relative to that descriptor, so a component swapped for a symlink (to a directory outside) is refused and
nothing outside the workspace is ever linked into, replaced or unlinked.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import stat
import time
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import orjson

from rise_batch.space.docstore import DocStore
from rise_batch.space.manifest import FILES, MANIFEST, MARKER, MARKER_TEXT, Arrival, check_workspace, read_manifest
from rise_batch.space.safe_open import (
    THROUGH_LINK,
    Below,
    NotADocument,
    UnsafeDirectory,
    copy_from,
    kind_of,
    link_from,
    open_path,
)

log = logging.getLogger(__name__)

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_DIR_FDS = 256  # parent directories held open per workspace (a search's union spans a few hundred hosts)
_DIR_MODE = 0o755  # readable by the unprivileged uid the sandbox runs as
_FALLBACK_NOTICES: set[tuple[int, int, int]] = set()
_REFUSAL_NOTICES: set[str] = set()  # paths already logged as refused in this process
_MISSING = (errno.ENOENT, errno.ENOTDIR)
_ABSENT = "absent"  # _add_checked's answer for a document without a file (a refusal is another string)


class AddResult(NamedTuple):
    new: list[str]  # docids that arrived with this call, in the order given
    present: int  # docids asked for that were already in the workspace
    missing: list[str]  # docids with no relpath in the docmap or no file on disk
    refused: dict[str, str] = {}  # docid -> why its file is not a document ("is a FIFO (named pipe)")


class Workspace:
    """One query's directory: WS/files/<relpath> (what the agent sees) and WS/manifest.jsonl (arrivals)."""

    def __init__(self, path: str | Path, store: DocStore, *, keep: bool = False) -> None:
        self.path = Path(path)
        self.store = store
        self.keep = keep
        self.files_dir = self.path / FILES
        self.arrivals: dict[str, Arrival] = {}
        self.by_relpath: dict[str, str] = {}
        self.calls = 0
        self.copied = 0  # files copied instead of hardlinked
        self._link_ok = True
        self._dst = f"{self.files_dir}/"
        self.files = Below(self.files_dir)  # what previews and `read` open: only regular files, no links
        self._dirs: dict[str, int] = {}  # parent relpath below files/ -> its descriptor, opened without links
        self._src_dirs: dict[str, int] = {}  # parent relpath below DOCS/corpus -> its O_PATH descriptor
        self._dirs_pid = os.getpid()
        if (self.path / MANIFEST).exists() or (self.path / MARKER).exists():
            check_workspace(self.path)
            self._reopen()
        else:
            if self.path.exists() and any(self.path.iterdir()):
                raise FileExistsError(f"{self.path} exists and is not a workspace (no {MANIFEST}); refusing to use it")
            self._create()

    def _create(self) -> None:
        """Make the workspace: its directory, the marker (a new file, never through a link), files/, the manifest."""
        self.path.mkdir(parents=True, exist_ok=True)
        try:
            ws_fd = os.open(self.path, _DIR_FLAGS)
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            raise UnsafeDirectory(f"{self.path} is a symbolic link; give the workspace's own directory") from None
        try:
            os.fchmod(ws_fd, _DIR_MODE)
            fd = os.open(
                MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o444, dir_fd=ws_fd
            )
            try:
                os.write(fd, MARKER_TEXT)
            finally:
                os.close(fd)
            os.mkdir(FILES, _DIR_MODE, dir_fd=ws_fd)
            files_fd = os.open(FILES, _DIR_FLAGS, dir_fd=ws_fd)
            try:
                os.fchmod(files_fd, _DIR_MODE)
            finally:
                os.close(files_fd)
            os.close(
                os.open(
                    MANIFEST, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=ws_fd
                )
            )
        finally:
            os.close(ws_fd)

    def _reopen(self) -> None:
        for a in read_manifest(self.path):
            self.arrivals[a.docid] = a
            self.by_relpath[a.relpath] = a.docid
            self.calls = max(self.calls, a.call + 1)

    def new_call(self) -> int:
        """Number a search call; its sub-queries' adds share it, so arrivals say which call brought a doc."""
        self.calls += 1
        return self.calls - 1

    def add(self, docids: Iterable[str], call: int | None = None) -> AddResult:
        """Place every docid not yet present, then append their arrivals to the manifest (one call if not given).

        A document whose file is missing is `missing`; one that is a link or not a regular file is `refused` (and
        logged once, naming it). Whatever else stops the call (a full disk) comes after the manifest lines of the
        files placed before it."""
        call = self.new_call() if call is None else call
        now = time.time()
        new: list[str] = []
        missing: list[str] = []
        refused: dict[str, str] = {}
        present = 0
        arrivals, by_relpath = self.arrivals, self.by_relpath
        asked = list(docids)
        fresh = [d for d in asked if d not in arrivals]
        rel_of = dict(zip(fresh, self.store.relpaths_of(fresh), strict=True))  # one batch, not a lookup each
        root_fd, is_regular, linkname, lstat, unlink = self.store.docs.fd(), stat.S_ISREG, os.link, os.lstat, os.unlink
        if self._dirs_pid != os.getpid():  # once per call, not per document (getpid is a system call)
            self._dirs, self._src_dirs, self._dirs_pid = {}, {}, os.getpid()
        # cleared in place when full (_close_dirs), never replaced during the loop
        dirs, src_dirs, files_fd = self._dirs, self._src_dirs, self.files.fd()
        lines: list[bytes] = []
        # The loop runs ~3,000 times per search; it is written for speed. Where the document's directory is already
        # open on both sides, the document is linked by name between the two open directories (linkat, not
        # following a final link) and the new name checked (lstat): 2 system calls. Anything else, or anything
        # unusual (a link, a FIFO, another file system, a name taken), goes the careful way (_add_checked).
        try:
            for docid in asked:
                if docid in arrivals:
                    present += 1
                    continue
                rel = rel_of[docid]
                if rel is None:
                    missing.append(docid)
                    continue
                placed = False
                head, _, name = rel.rpartition("/")
                parent = dirs.get(head) if head else files_fd
                if parent is not None and self._link_ok:
                    try:
                        src = src_dirs.get(head) if head else root_fd
                        if src is None:
                            src = self._src_dir(root_fd, head)
                        linkname(name, name, src_dir_fd=src, dst_dir_fd=parent, follow_symlinks=False)
                        if is_regular(lstat(name, dir_fd=parent).st_mode):
                            placed = True
                        else:  # a link or a FIFO linked as itself: never left; refused below, as it always was
                            unlink(name, dir_fd=parent)
                    except OSError:
                        pass
                if not placed:
                    refusal = self._add_checked(root_fd, rel)
                    if refusal is _ABSENT:
                        missing.append(docid)
                        continue
                    if refusal is not None:
                        refused[docid] = refusal
                        continue
                seq = len(arrivals)
                arrivals[docid] = Arrival(docid, rel, call, seq, now)
                by_relpath[rel] = docid
                new.append(docid)
                lines.append(orjson.dumps({"docid": docid, "relpath": rel, "call": call, "seq": seq, "time": now}))
        finally:
            if lines:
                self._record(lines, new)
        return AddResult(new, present, missing, refused)

    def _add_checked(self, root_fd: int, rel: str) -> str | None:
        """Place `rel` from a descriptor opened below DOCS/corpus without following a link (open_path), once fstat
        says it is a regular file: None when placed, _ABSENT when there is no such file, else why it is refused."""
        try:
            fd = open_path(root_fd, rel)
        except OSError as e:
            if e.errno in _MISSING:
                return _ABSENT
            if e.errno in (errno.ELOOP, errno.EXDEV):
                return self._refuse(rel, THROUGH_LINK)
            raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return self._refuse(rel, kind_of(st.st_mode))
            self._place(fd, st, rel)
        finally:
            os.close(fd)
        return None

    def _src_dir(self, root_fd: int, head: str) -> int:
        """The descriptor (O_PATH) of `head` below DOCS/corpus, reached without a link or a mount point (open_path),
        held open for the next documents of the same directory."""
        if len(self._src_dirs) >= _MAX_DIR_FDS:  # these only: add() holds a workspace directory's descriptor now
            for fd in self._src_dirs.values():
                os.close(fd)
            self._src_dirs.clear()
        fd = self._src_dirs[head] = open_path(root_fd, head)
        return fd

    def _record(self, lines: list[bytes], docids: list[str]) -> None:
        """Append the arrivals' lines in one write; if that fails (a full disk), the manifest is cut back to its
        last whole line and the files placed by this call are removed: no file is ever without its line."""
        path = self.path / MANIFEST
        data = b"\n".join(lines) + b"\n"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
            try:
                if os.write(fd, data) != len(data):
                    raise OSError(errno.ENOSPC, "short write (disk full?)", str(path))
            except OSError:
                os.ftruncate(fd, size)
                for docid in docids:
                    rel = self.arrivals.pop(docid).relpath
                    self.by_relpath.pop(rel, None)
                    try:
                        os.unlink(self._name(rel), dir_fd=self._dir_of(rel)[0])
                    except FileNotFoundError:
                        pass
                raise
        finally:
            os.close(fd)

    def _place(self, fd: int, st: os.stat_result, rel: str) -> None:
        for attempt in range(2):
            dir_fd, name = self._dir_of(rel)
            try:
                self._put(fd, st, dir_fd, name)
                return
            except FileExistsError:  # left by a run that died before writing its manifest line
                if self._is_placed(dir_fd, name, st):
                    return
                if attempt:
                    break
                os.unlink(name, dir_fd=dir_fd)  # ours, not this file (a copy cut short, an older version)
        raise FileExistsError(errno.EEXIST, "cannot place the document", self._dst + rel)

    def _put(self, fd: int, st: os.stat_result, dir_fd: int, name: str) -> None:
        # by name relative to the parent directory held open: no walk from / (nor through a link) for each link
        if self._link_ok:
            try:
                link_from(fd, st, name, dir_fd)
                return
            except OSError as e:
                if e.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                    raise
                self._notice(e)
                if e.errno != errno.EMLINK:  # at the link limit only this file is copied; the others still link
                    self._link_ok = False
        copy_from(fd, st, name, dir_fd)  # to a new name only (an existing one may be a corpus hardlink)
        self.copied += 1

    @staticmethod
    def _is_placed(dir_fd: int, name: str, st: os.stat_result) -> bool:
        """Is the file `name` this document: its hardlink, or a whole copy (copies are made 0444 at the end)?"""
        have = os.lstat(name, dir_fd=dir_fd)
        if (have.st_ino, have.st_dev) == (st.st_ino, st.st_dev):
            return True
        return (
            stat.S_ISREG(have.st_mode)
            and stat.S_IMODE(have.st_mode) == 0o444
            and have.st_nlink == 1
            and have.st_size == st.st_size
        )

    @staticmethod
    def _name(rel: str) -> str:
        return rel.rpartition("/")[2]

    def _dir_of(self, rel: str) -> tuple[int, str]:
        """(descriptor of rel's parent below files/, rel's last component): each directory opened one component at a
        time without following a link (made where missing), held open for the next documents of the same parent."""
        head, _, name = rel.rpartition("/")
        if not head:
            return self.files.fd(), name
        if self._dirs_pid != os.getpid():  # a copy of this object in another process: its descriptors are not ours
            self._dirs, self._src_dirs, self._dirs_pid = {}, {}, os.getpid()
        fd = self._dirs.get(head)
        if fd is None:
            if len(self._dirs) >= _MAX_DIR_FDS:
                self._close_dirs()
            fd = self._dirs[head] = self._open_dirs(head)
        return fd, name

    def _open_dirs(self, head: str) -> int:
        fd = os.dup(self.files.fd())  # O_PATH: a base for the *at calls below
        try:
            for part in head.split("/"):
                try:
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    try:
                        os.mkdir(part, _DIR_MODE, dir_fd=fd)
                    except FileExistsError:  # made meanwhile by another search of this workspace
                        pass
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                    os.fchmod(nxt, _DIR_MODE)  # readable by the sandbox's uid whatever the umask
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise self._swapped(head) from None
                    raise
                os.close(fd)
                fd = nxt
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _swapped(self, rel: str) -> UnsafeDirectory:
        return UnsafeDirectory(
            f"{self._dst}{rel}: a directory of this workspace was replaced by a link or a file; nothing was placed "
            "through it; delete the workspace and search again"
        )

    def _close_dirs(self) -> None:
        if self._dirs_pid == os.getpid():
            for fd in [*self._dirs.values(), *self._src_dirs.values()]:
                os.close(fd)
        self._dirs.clear()  # in place: add() holds these dicts
        self._src_dirs.clear()

    def _refuse(self, rel: str, what: str) -> str:
        """Log a refused document once per process, one line naming the path and the remedy; `what` (no host
        path) is for the agent's listing."""
        if rel not in _REFUSAL_NOTICES:
            _REFUSAL_NOTICES.add(rel)
            log.warning("%s", NotADocument(str(self.store.corpus_dir), rel, what))
        return what

    def _notice(self, e: OSError) -> None:
        key = (os.stat(self.store.corpus_dir).st_dev, os.stat(self.files_dir).st_dev, e.errno or 0)
        if key in _FALLBACK_NOTICES:
            return
        _FALLBACK_NOTICES.add(key)
        if e.errno == errno.EMLINK:
            log.warning(
                "workspace %s: %s is at its file system's hardlink limit; copying it (and any other file at the "
                "limit) instead of linking",
                self.path,
                f"{self.store.corpus_dir}/{e.filename}",
            )
            return
        why = "different file systems" if e.errno == errno.EXDEV else "the kernel refused a hardlink (not our file?)"
        log.warning(
            "workspace %s: cannot hardlink from %s (%s); copying files instead (slower, and takes space)",
            self.path,
            self.store.corpus_dir,
            why,
        )

    def __len__(self) -> int:
        return len(self.arrivals)

    def __contains__(self, docid: object) -> bool:
        return docid in self.arrivals

    def docids(self) -> list[str]:
        return sorted(self.arrivals, key=lambda d: self.arrivals[d].seq)

    def close(self) -> None:
        """Remove the workspace (unlinks the hardlinks; corpus files are untouched) unless it is kept. Its
        descriptors are closed here, not left to a finalizer: in a garbage collection each close releases and
        retakes the GIL, and the thread a collection ran in was often a search's."""
        self._close_dirs()
        self.files.close()
        if self.keep or not (self.path / MANIFEST).exists():
            return
        shutil.rmtree(self.path)

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
