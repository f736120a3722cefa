"""A query's interaction space: a directory that only `search` adds to, by hardlinking corpus files into it.

Hardlinks make a 3,000-document workspace cost a few milliseconds and no disk, and keep the corpus-relative paths
the agent sees in `rg` output identical to the corpus's. Where a hardlink is impossible (workspace on another file
system, or the kernel's protected_hardlinks refusing a file we do not own) we copy instead, and say so once.
The manifest (docid -> which search call and when) lives next to the files, not among them, so the agent never
greps it.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

import orjson

from rise_batch.corpus.docmap import check_relpath, check_relpaths, checked_columns

log = logging.getLogger(__name__)

FILES = "files"
MANIFEST = "manifest.jsonl"
_DIR_MODE = 0o755  # readable by the unprivileged uid the sandbox runs as
_FALLBACK_NOTICES: set[tuple[int, int, int]] = set()


class DocStore:
    """A materialized corpus: DIR/corpus/<relpath> files plus DIR/docmap.parquet (docid, relpath).

    Every relpath is checked once here, so the joins below (workspace links, previews, reads) never leave corpus/.
    """

    def __init__(self, docs_dir: str | Path, relpaths: Mapping[str, str] | None = None) -> None:
        self.dir = Path(docs_dir)
        self.corpus_dir = self.dir / "corpus"
        if not self.corpus_dir.is_dir():
            raise FileNotFoundError(f"no corpus/ directory in {self.dir} (expected DIR/corpus/<relpath> files)")
        if relpaths is not None:
            check_relpaths(list(relpaths.values()), f"relpaths for {self.dir}", names=list(relpaths))
        self.relpath: Mapping[str, str] = relpaths if relpaths is not None else load_docmap(self.dir)
        self._docid: dict[str, str] | None = None

    def docid(self, relpath: str) -> str | None:
        if self._docid is None:
            self._docid = {rel: d for d, rel in self.relpath.items()}
        return self._docid.get(relpath)

    def path(self, docid: str) -> Path | None:
        rel = self.relpath.get(docid)
        return None if rel is None else self.corpus_dir / rel

    def __len__(self) -> int:
        return len(self.relpath)


def load_docmap(docs_dir: str | Path) -> dict[str, str]:
    """docid -> relpath of a docs dir (or a `structure` OUT in object storage); a docmap holding one unsafe relpath
    refuses the whole dir, naming the row."""
    import pyarrow.parquet as pq

    from rise_batch.storage import arrow_source, location

    path = location(docs_dir) / "docmap.parquet"
    if not path.exists():
        raise FileNotFoundError(f"no docmap.parquet in {docs_dir} (written by `rise-batch structure`)")
    where, fs = arrow_source(path)
    table = pq.read_table(where, columns=["docid", "relpath"], filesystem=fs)
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


def read_manifest(ws_dir: str | Path) -> list[Arrival]:
    """The arrivals recorded in WS/manifest.jsonl; an unsafe relpath refuses the workspace (it is joined below)."""
    path = Path(ws_dir) / MANIFEST
    out: list[Arrival] = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                a = Arrival(**json.loads(line))
                check_relpath(a.relpath, f"{path}: line {n}", "not a workspace this project wrote; delete it")
                out.append(a)
    return out


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
        self._src = f"{store.corpus_dir}/"
        self._dst = f"{self.files_dir}/"
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
        """Link every docid not yet present, then append their arrivals to the manifest (one call if not given)."""
        call = self.new_call() if call is None else call
        now = time.time()
        new: list[str] = []
        missing: list[str] = []
        present = 0
        arrivals, by_relpath, relpath_of = self.arrivals, self.by_relpath, self.store.relpath
        src, dst, link = self._src, self._dst, os.link
        lines: list[bytes] = []
        # The loop runs ~3,000 times per search; it is written for speed (locals, the plain link inline).
        for docid in docids:
            if docid in arrivals:
                present += 1
                continue
            rel = relpath_of.get(docid)
            if rel is None:
                missing.append(docid)
                continue
            try:
                link(src + rel, dst + rel)
            except OSError:  # new parent dir, missing file, or another file system: the careful path
                if not self._materialize(rel):
                    missing.append(docid)
                    continue
            seq = len(arrivals)
            arrivals[docid] = Arrival(docid, rel, call, seq, now)
            by_relpath[rel] = docid
            new.append(docid)
            lines.append(orjson.dumps({"docid": docid, "relpath": rel, "call": call, "seq": seq, "time": now}))
        if lines:
            with open(self.path / MANIFEST, "ab") as f:
                f.write(b"\n".join(lines) + b"\n")
        return AddResult(new, present, missing)

    def _materialize(self, rel: str) -> bool:
        # Plain strings: pathlib's joins cost as much as the link syscall itself at 3,000 links per search.
        src, dst = self._src + rel, self._dst + rel
        try:
            self._place(src, dst)
        except FileExistsError:  # left by a run that died before writing its manifest line
            pass
        except FileNotFoundError:  # the parent directory is new, or the corpus file is missing
            if not os.path.exists(src):
                return False
            self._make_parents(rel)
            try:
                self._place(src, dst)
            except FileExistsError:
                pass
        return True

    def _place(self, src: str, dst: str) -> None:
        if self._link_ok:
            try:
                os.link(src, dst)
                return
            except OSError as e:
                if e.errno not in (errno.EXDEV, errno.EPERM):
                    raise
                self._link_ok = False
                self._notice(e)
        # "xb": never open an existing name for writing, it may be a hardlink to a corpus file.
        with open(src, "rb") as fsrc, open(dst, "xb") as fdst:
            shutil.copyfileobj(fsrc, fdst)
        os.chmod(dst, 0o444)
        self.copied += 1

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
        why = "different file systems" if e.errno == errno.EXDEV else "the kernel refused a hardlink (not our file?)"
        key = (os.stat(self.store.corpus_dir).st_dev, os.stat(self.files_dir).st_dev, e.errno)
        if key not in _FALLBACK_NOTICES:
            _FALLBACK_NOTICES.add(key)
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
