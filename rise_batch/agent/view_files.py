"""A view's files derived from a structured docs directory: built once per node into DOCS/<dir>/, never half-read.

Every view but the structured files themselves (agent/views.py: the original text, the TOC-only files, ...) is
derived from a `rise-batch structure` output by its builder, which writes `corpus/<relpath>` files under a staging
directory. This module holds what they share: one build at a time per node (a lock file in DOCS), the staging
sibling renamed into place once complete, the docmap copied beside it, and a marker holding the view's build rule,
so a view built by an older rule, or of an earlier copy of DOCS (its docmap differs), is rebuilt rather than
reused. Each node of a cluster that holds its own copy of DOCS (agent/inputs.py) builds its own view.

What a builder reads of the run comes from the checkpoint (`checkpoint_outcomes`), never guessed from the text.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rise_batch.executor.local import process_map
from rise_batch.safe_read import RefusedFile, open_regular, read_regular_file
from rise_batch.space.docstore import DocStore
from rise_batch.space.safe_open import Below, NotADocument
from rise_batch.structuring.checkpoint import CheckpointStore
from rise_batch.types import OUTCOME_TOC

log = logging.getLogger(__name__)
COMPLETE = ".complete"
Builder = Callable[[Path, Path, int], None]  # (DOCS, staging dir to fill with corpus/<relpath>, workers)
# (open structured file's fd, its stat, DOCS/corpus, STAGING/corpus, relpath, docid, its row or None): writes one file
FileWriter = Callable[[int, os.stat_result, str, str, str, str, Any], None]
_CHUNK = 2000


def is_structure_output(docs_dir: Path) -> bool:
    """A `rise-batch structure` output (structured files), as opposed to a plain materialized corpus."""
    return (docs_dir / "manifest.json").is_file() and (docs_dir / "checkpoint").is_dir()


def checkpoint_outcomes(docs_dir: Path) -> dict[str, tuple[bool, str]]:
    """docid -> (a TOC was inserted, content hash of the corpus text), from every checkpoint part of the run."""
    out: dict[str, tuple[bool, str]] = {}
    store = CheckpointStore(docs_dir)
    for part in store.parts():  # a damaged part: one line naming it and the command that repairs it
        cols = store.read_part(part, ["docid", "outcome", "content_hash"]).to_pydict()
        for docid, outcome, digest in zip(cols["docid"], cols["outcome"], cols["content_hash"], strict=True):
            out[docid] = (outcome == OUTCOME_TOC, digest or "")
    return out


def lock_name(subdir: str) -> str:
    return f".{subdir}.lock"


def derived_dir(docs_dir: str | Path, subdir: str, rule: str, build: Builder, workers: int) -> Path:
    """DOCS/<subdir>, built by `build` on first use on this node and reused while complete.

    Called by the driver and by every worker that reads the view, so a node that has its own copy of DOCS builds its
    own. One build per node: under a lock file in DOCS, into a temporary sibling renamed into place once complete, so
    a worker never uses a partial view and a killed build is redone. A view is used only when its marker holds `rule`
    and its docmap.parquet is DOCS's."""
    docs = Path(docs_dir)
    into = docs / subdir
    if complete(docs, into, rule):
        return into
    lock = docs / lock_name(subdir)
    # O_NOFOLLOW | O_NONBLOCK: a lock planted as a link (to a file elsewhere) or a FIFO is refused, never written
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(lock, flags, 0o644)
    except OSError as e:
        raise RefusedFile(f"{lock}: cannot be the {subdir} view's lock ({e.strerror}); remove it") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise RefusedFile(f"{lock} is not a regular file; remove it")
        fcntl.flock(fd, fcntl.LOCK_EX)  # another worker of this node building it: wait, then use its view
        if not complete(docs, into, rule):
            _build(docs, into, rule, build, workers)
    finally:
        os.close(fd)
    return into


def complete(docs: Path, into: Path, rule: str) -> bool:
    """Is the view whole, of this rule and of this DOCS? Its marker and docmaps are opened as every file (safe_read:
    below DOCS, the view included, no link, regular): a FIFO or a link there means "not complete" (rebuilt), never a
    hang."""
    try:
        marker = read_regular_file(into / COMPLETE, below=docs, max_bytes=4096)
        if marker.decode("utf-8", "replace") != rule:
            return False
        with (
            open_regular(docs / "docmap.parquet", below=docs) as a,
            open_regular(into / "docmap.parquet", below=docs) as b,
        ):
            if os.fstat(a.fileno()).st_size != os.fstat(b.fileno()).st_size:
                return False
            while chunk := a.read(1 << 20):
                if chunk != b.read(len(chunk)):
                    return False
            return True
    except (OSError, ValueError):
        return False


def _build(docs: Path, into: Path, rule: str, build: Builder, workers: int) -> None:
    for old in docs.glob(f".{into.name}.tmp-*"):  # a build killed on this node (we hold the lock)
        if old.is_symlink():
            old.unlink()  # the link, never what it points to
        else:
            shutil.rmtree(old, ignore_errors=True)
    tmp = docs / f".{into.name}.tmp-{os.getpid()}"
    try:
        tmp.mkdir()  # new: never a planted name (the killed builds' were removed above)
        (tmp / "corpus").mkdir()
        build(docs, tmp, workers)
        shutil.copyfile(docs / "docmap.parquet", tmp / "docmap.parquet")
        (tmp / COMPLETE).write_text(rule, encoding="utf-8")
        if into.is_symlink():
            into.unlink()
        elif into.exists():  # incomplete, by an older rule, or of an earlier copy of DOCS
            shutil.rmtree(into)
        tmp.rename(into)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def build_files(docs: Path, tmp: Path, workers: int, rows: dict[str, Any], write: FileWriter) -> None:
    """A builder's common part: `write` called on every structured file of DOCS (with its row in `rows`, None
    without one), chunks of documents in spawned processes (a Ray worker holds threads), `write` a module-level
    function so it travels to them. A file that is a link or not regular is left out of the view (as from the
    workspaces made from the structured files), said in one warning line each."""
    store = DocStore(docs)  # every relpath checked before it is joined below
    items = [(docid, rel, rows.get(docid)) for docid, rel in store.relpath.items()]
    chunks = [items[i : i + _CHUNK] for i in range(0, len(items), _CHUNK)]
    src, dst = str(store.corpus_dir), str(tmp / "corpus")
    calls = [(src, dst, chunk, write) for chunk in chunks]
    for line in (r for rs in process_map(_write_chunk, calls, min(workers, len(chunks))) for r in rs):
        log.warning("%s", line)


def _write_chunk(src: str, dst: str, items: list[tuple[str, str, Any]], write: FileWriter) -> list[str]:
    """`write` each (docid, relpath, row) item's structured file, opened without following links and regular (a
    symlink, FIFO or device is left out, its one-line refusal returned)."""
    docs, refused = Below(src), []
    for docid, rel, row in items:
        try:
            fd, st = docs.open(rel)
        except NotADocument as e:
            refused.append(str(e))
            continue
        except OSError as e:
            if e.errno in (errno.ENOENT, errno.ENOTDIR):
                continue  # not materialized (an unfinished shard): absent here as in the structured dir
            raise
        try:
            write(fd, st, src, dst, rel, docid, row)
        finally:
            os.close(fd)
    return refused
