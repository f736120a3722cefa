"""A query's interaction space: a directory that only `search` adds to, by hardlinking corpus files into it.

Hardlinks make a 3,000-document workspace cost a few milliseconds and no disk, and keep the corpus-relative paths
the agent sees in `rg` output identical to the corpus's. Each document is opened below DOCS/corpus without
following links and must be a regular file (space/safe_open.py); the link is made from that open file, so a
symlink, a FIFO or a device in a shared docs dir is refused (one line naming it) and never reaches the agent. Where
a hardlink is impossible (workspace on another file system, the kernel's protected_hardlinks refusing a file we do
not own, a file at the hardlink limit) we copy from the open file instead, and say so once.
The manifest (docid -> which search call and when) lives next to the files, not among them, so the agent never
greps it; every file placed gets its line, even when the call fails half-way.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import stat
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

import orjson

from rise_batch.corpus import docmap_table
from rise_batch.corpus.docmap import check_relpath, check_relpaths, checked_columns
from rise_batch.safe_read import open_regular, read_parquet
from rise_batch.space.safe_open import THROUGH_LINK, Below, NotADocument, copy_from, kind_of, link_from, open_path
from rise_batch.storage import location

log = logging.getLogger(__name__)

FILES = "files"
MANIFEST = "manifest.jsonl"
_DIR_MODE = 0o755  # readable by the unprivileged uid the sandbox runs as
_FALLBACK_NOTICES: set[tuple[int, int, int]] = set()
_REFUSAL_NOTICES: set[str] = set()  # paths already logged as refused in this process
_MISSING = (errno.ENOENT, errno.ENOTDIR)


class DocStore:
    """A materialized corpus: DIR/corpus/<relpath> files plus DIR/docmap.parquet (docid, relpath).

    Every relpath is checked once here, so the joins below (workspace links, previews, reads) never leave corpus/.
    The docs dir's own map is memory-mapped (DIR/docmap.strtab, derived on first use: rise_batch.corpus.docmap_table),
    so the trajectory actors of a node share one copy of it.
    """

    def __init__(self, docs_dir: str | Path, relpaths: Mapping[str, str] | None = None) -> None:
        self.dir = Path(docs_dir)
        self.corpus_dir = self.dir / "corpus"
        if not self.corpus_dir.is_dir():
            raise FileNotFoundError(f"no corpus/ directory in {self.dir} (expected DIR/corpus/<relpath> files)")
        if relpaths is not None:
            check_relpaths(list(relpaths.values()), f"relpaths for {self.dir}", names=list(relpaths))
        self.relpath: Mapping[str, str] = relpaths if relpaths is not None else docmap_table.mapped_docmap(self.dir)
        self._docid: dict[str, str] | None = None
        self.docs = Below(self.corpus_dir)
        self.docs.fd()  # a corpus/ that is itself a symlink is refused here, before any document is opened

    def docid(self, relpath: str) -> str | None:
        if isinstance(self.relpath, docmap_table.MappedDocmap):  # the docs dir's own map: its reverse is mapped too
            return self.relpath.docid(relpath)
        if self._docid is None:
            self._docid = {rel: d for d, rel in self.relpath.items()}
        return self._docid.get(relpath)

    def path(self, docid: str) -> Path | None:
        rel = self.relpath.get(docid)
        return None if rel is None else self.corpus_dir / rel

    def read(self, docid: str, max_bytes: int | None = None) -> bytes | None:
        """The document's bytes (at most max_bytes), None when it has no relpath or no file; NotADocument (one
        line naming the path) for a link or a file that is not regular."""
        rel = self.relpath.get(docid)
        if rel is None:
            return None
        try:
            return self.docs.read(rel, max_bytes)
        except OSError as e:
            if e.errno in _MISSING:
                return None
            raise

    def __len__(self) -> int:
        return len(self.relpath)


def load_docmap(docs_dir: str | Path) -> dict[str, str]:
    """docid -> relpath of a docs dir (or a `structure` OUT in object storage); a docmap holding one unsafe relpath
    refuses the whole dir, naming the row."""
    path = location(docs_dir) / "docmap.parquet"
    if not path.exists():
        raise FileNotFoundError(f"no docmap.parquet in {docs_dir} (written by `rise-batch structure`)")
    table = read_parquet(path, columns=["docid", "relpath"])
    docids, rels = checked_columns(table, f"{path}: refusing this docs dir")
    return dict(zip(docids, rels, strict=True))


class Arrival(NamedTuple):
    docid: str
    relpath: str
    call: int  # which search call brought it (0-based)
    seq: int  # arrival order within the workspace (0-based)
    time: float  # unix seconds


class AddResult(NamedTuple):
    new: list[str]  # docids that arrived with this call, in the order given
    present: int  # docids asked for that were already in the workspace
    missing: list[str]  # docids with no relpath in the docmap or no file on disk
    refused: dict[str, str] = {}  # docid -> why its file is not a document ("is a FIFO (named pipe)")


_NOT_OURS = "not a workspace this project wrote; delete it"
_ARRIVAL_TYPES = {"docid": (str,), "relpath": (str,), "call": (int,), "seq": (int,), "time": (int, float)}


def read_manifest(ws_dir: str | Path) -> list[Arrival]:
    """The arrivals recorded in WS/manifest.jsonl, opened as every file the engine reads (safe_read: below WS, no
    link, a regular file) and each line checked to be exactly an arrival: a line of another shape, or an unsafe
    relpath (it is joined below), refuses the workspace in one line naming the file and the line."""
    path = Path(ws_dir) / MANIFEST
    out: list[Arrival] = []
    with open_regular(path, below=ws_dir) as f:
        for n, raw in enumerate(f, 1):
            if raw.strip():
                out.append(_arrival(raw, f"{path}: line {n}"))
    return out


def _arrival(raw: bytes, where: str) -> Arrival:
    try:
        rec = json.loads(raw)
    except ValueError:  # UnicodeDecodeError too
        raise ValueError(f"{where}: not JSON; {_NOT_OURS}") from None
    ok = isinstance(rec, dict) and set(rec) == set(_ARRIVAL_TYPES)
    if not ok or any(type(rec[k]) not in t for k, t in _ARRIVAL_TYPES.items()):  # type(): a bool is no call number
        shown = repr(rec) if len(repr(rec)) <= 200 else repr(rec)[:200] + "..."
        raise ValueError(f"{where}: {shown} is not an arrival (docid, relpath, call, seq, time); {_NOT_OURS}")
    check_relpath(rec["relpath"], where, _NOT_OURS)
    return Arrival(**rec)


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
        if (self.path / MANIFEST).exists():
            self._reopen()
        else:
            if self.path.exists() and any(self.path.iterdir()):
                raise FileExistsError(f"{self.path} exists and is not a workspace (no {MANIFEST}); refusing to use it")
            self.files_dir.mkdir(parents=True, exist_ok=True)
            for d in (self.path, self.files_dir):
                os.chmod(d, _DIR_MODE)
            (self.path / MANIFEST).touch()

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
        arrivals, by_relpath, relpath_of = self.arrivals, self.by_relpath, self.store.relpath
        root_fd, opener, fstat, close, is_regular = self.store.docs.fd(), open_path, os.fstat, os.close, stat.S_ISREG
        files_fd, link = self.files.fd(), link_from
        lines: list[bytes] = []
        # The loop runs ~3,000 times per search; it is written for speed (locals; open, fstat, link, close inline).
        try:
            for docid in docids:
                if docid in arrivals:
                    present += 1
                    continue
                rel = relpath_of.get(docid)
                if rel is None:
                    missing.append(docid)
                    continue
                try:
                    fd = opener(root_fd, rel)
                except OSError as e:
                    if e.errno in _MISSING:
                        missing.append(docid)
                    elif e.errno in (errno.ELOOP, errno.EXDEV):
                        refused[docid] = self._refuse(rel, THROUGH_LINK)
                    else:
                        raise
                    continue
                try:
                    st = fstat(fd)
                    if not is_regular(st.st_mode):
                        refused[docid] = self._refuse(rel, kind_of(st.st_mode))
                        continue
                    placed = False
                    if self._link_ok:
                        try:
                            link(fd, st, rel, files_fd)
                            placed = True
                        except OSError:  # a new parent directory, another file system, the link limit
                            pass
                    if not placed:
                        self._place(fd, st, rel)  # the careful path
                finally:
                    close(fd)
                seq = len(arrivals)
                arrivals[docid] = Arrival(docid, rel, call, seq, now)
                by_relpath[rel] = docid
                new.append(docid)
                lines.append(orjson.dumps({"docid": docid, "relpath": rel, "call": call, "seq": seq, "time": now}))
        finally:
            if lines:
                self._record(lines, new)
        return AddResult(new, present, missing, refused)

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
                        os.unlink(rel, dir_fd=self.files.fd())
                    except FileNotFoundError:
                        pass
                raise
        finally:
            os.close(fd)

    def _place(self, fd: int, st: os.stat_result, rel: str) -> None:
        # Plain strings: pathlib's joins cost as much as the link syscall itself at 3,000 links per search.
        for attempt in range(3):
            try:
                self._put(fd, st, rel)
                return
            except FileNotFoundError:  # the parent directory is new
                if attempt:
                    raise
                self._make_parents(rel)
            except FileExistsError:  # left by a run that died before writing its manifest line
                if self._is_placed(rel, st):
                    return
                os.unlink(rel, dir_fd=self.files.fd())  # ours, not this file (a copy cut short, an older version)
        raise FileExistsError(errno.EEXIST, "cannot place the document", self._dst + rel)

    def _put(self, fd: int, st: os.stat_result, rel: str) -> None:
        # relative to the workspace's files/ held open: no walk from / for each of ~3,000 links
        if self._link_ok:
            try:
                link_from(fd, st, rel, self.files.fd())
                return
            except OSError as e:
                if e.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                    raise
                self._notice(e)
                if e.errno != errno.EMLINK:  # at the link limit only this file is copied; the others still link
                    self._link_ok = False
        copy_from(fd, st, rel, self.files.fd())  # to a new name only (an existing one may be a corpus hardlink)
        self.copied += 1

    def _is_placed(self, rel: str, st: os.stat_result) -> bool:
        """Is the file at `rel` this document: its hardlink, or a whole copy (copies are made 0444 at the end)?"""
        have = os.lstat(rel, dir_fd=self.files.fd())
        if (have.st_ino, have.st_dev) == (st.st_ino, st.st_dev):
            return True
        return (
            stat.S_ISREG(have.st_mode)
            and stat.S_IMODE(have.st_mode) == 0o444
            and have.st_nlink == 1
            and have.st_size == st.st_size
        )

    def _refuse(self, rel: str, what: str) -> str:
        """Log a refused document once per process, one line naming the path and the remedy; `what` (no host
        path) is for the agent's listing."""
        if rel not in _REFUSAL_NOTICES:
            _REFUSAL_NOTICES.add(rel)
            log.warning("%s", NotADocument(str(self.store.corpus_dir), rel, what))
        return what

    def _make_parents(self, rel: str) -> None:
        d = self.files_dir
        for part in rel.split("/")[:-1]:
            d = d / part
            try:
                d.mkdir()
                os.chmod(d, _DIR_MODE)
            except FileExistsError:
                pass

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
        """Remove the workspace (unlinks the hardlinks; corpus files are untouched) unless it is kept."""
        if self.keep or not (self.path / MANIFEST).exists():
            return
        shutil.rmtree(self.path)

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
