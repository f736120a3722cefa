"""The original-text twin of a structured docs directory, for the systems that must not see tables of contents.

RISE-BM25, the retrieval agent and DCI read the documents as they were. The structure job writes structured files
only, and a TOC can be removed exactly (the structured document's invariant, ARCHITECTURE.md), so the twin is derived
from them: same relpaths, same docmap, TOC block and inserted headings removed. Files without a TOC are hardlinked,
not copied. The twin is built once per node that reads it (each node of a cluster may hold its own copy of DOCS),
into DOCS/original/, under a lock and renamed into place complete, so an interrupted build is redone and a partial
one never read.

What to strip is read from the checkpoint, never guessed from the text: a document whose own text holds a
TOC-like block ("## Table of Contents" ... "=== DOCUMENT BODY ===") is left whole unless its checkpoint row says
a TOC was inserted. Every original is then checked against the row's content hash (the SHA-256 of the corpus text
the job read), so a twin never holds a text the corpus did not: a mismatch stops the build, naming the file.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import stat
from pathlib import Path

from rise_batch.executor.local import process_map
from rise_batch.safe_read import RefusedFile, open_regular, read_regular_file
from rise_batch.space.docstore import DocStore
from rise_batch.space.safe_open import Below, NotADocument, link_from, read_from
from rise_batch.structure.backends import content_hash
from rise_batch.structure.render import strip_structure
from rise_batch.structuring.checkpoint import CheckpointStore
from rise_batch.types import OUTCOME_TOC

log = logging.getLogger(__name__)
ORIGINAL_DIR = "original"
COMPLETE = ".complete"
LOCK = ".original.lock"  # in DOCS: one build at a time per node
# The marker's content: a twin built by an older rule (text-guessed stripping, unchecked) is rebuilt, not reused.
BUILD_RULE = "checkpoint-outcome+content-hash v1\n"
_CHUNK = 2000
REMEDY = "re-create the structured files with `rise-batch materialize {docs}`, then re-run"


class OriginalMismatch(ValueError):
    """A structured file that does not give back the corpus text its checkpoint row recorded."""


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


def original_docs(docs_dir: str | Path, workers: int = 2) -> Path:
    """The docs dir holding original text: DOCS/original (built on first use) or DOCS itself if never structured.

    Called by the driver and by every worker that reads originals, so a node that has its own copy of DOCS builds
    its own twin. One build per node: under a lock file in DOCS, into a temporary sibling renamed into place once
    complete, so a worker never uses a partial twin and a killed build is redone. A twin is used only when its
    marker holds the current build rule and its docmap.parquet is DOCS's (a twin of an earlier copy is rebuilt)."""
    docs = Path(docs_dir)
    twin = docs / ORIGINAL_DIR
    if _complete(docs, twin):
        return twin
    if not is_structure_output(docs):
        return docs
    import fcntl

    # O_NOFOLLOW | O_NONBLOCK: a lock planted as a link (to a file elsewhere) or a FIFO is refused, never written
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(docs / LOCK, flags, 0o644)
    except OSError as e:
        raise RefusedFile(f"{docs / LOCK}: cannot be the twin's lock ({e.strerror}); remove it") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise RefusedFile(f"{docs / LOCK} is not a regular file; remove it")
        fcntl.flock(fd, fcntl.LOCK_EX)  # another worker of this node building it: wait, then use its twin
        if not _complete(docs, twin):
            _build(docs, twin, workers)
    finally:
        os.close(fd)
    return twin


def _complete(docs: Path, twin: Path) -> bool:
    """Is the twin whole and of this DOCS? Its marker and docmaps are opened as every file (safe_read: below DOCS,
    the twin included, no link, regular): a FIFO or a link there means "not complete" (rebuilt), never a hang."""
    try:
        marker = read_regular_file(twin / COMPLETE, below=docs, max_bytes=4096)
        if marker.decode("utf-8", "replace") != BUILD_RULE:
            return False
        with (
            open_regular(docs / "docmap.parquet", below=docs) as a,
            open_regular(twin / "docmap.parquet", below=docs) as b,
        ):
            if os.fstat(a.fileno()).st_size != os.fstat(b.fileno()).st_size:
                return False
            while chunk := a.read(1 << 20):
                if chunk != b.read(len(chunk)):
                    return False
            return True
    except (OSError, ValueError):
        return False


def _build(docs: Path, twin: Path, workers: int) -> None:
    store = DocStore(docs)  # every relpath checked before it is joined below
    rows = checkpoint_outcomes(docs)
    for old in docs.glob(f".{ORIGINAL_DIR}.tmp-*"):  # a build killed on this node (we hold the lock)
        if old.is_symlink():
            old.unlink()  # the link, never what it points to
        else:
            shutil.rmtree(old, ignore_errors=True)
    tmp = docs / f".{ORIGINAL_DIR}.tmp-{os.getpid()}"
    try:
        tmp.mkdir()  # new: never a planted name (the killed builds' were removed above)
        (tmp / "corpus").mkdir()
        items = [(docid, rel, *rows.get(docid, (False, None))) for docid, rel in store.relpath.items()]
        chunks = [items[i : i + _CHUNK] for i in range(0, len(items), _CHUNK)]
        src, dst = str(store.corpus_dir), str(tmp / "corpus")
        calls = [(src, dst, chunk) for chunk in chunks]  # spawned processes: a Ray worker holds threads
        refused = [r for rs in process_map(_strip_chunk, calls, min(workers, len(chunks))) for r in rs]
        for line in refused:  # absent from the twin, as from the workspaces made from the structured files
            log.warning("%s", line)
        shutil.copyfile(docs / "docmap.parquet", tmp / "docmap.parquet")
        (tmp / COMPLETE).write_text(BUILD_RULE, encoding="utf-8")
        if twin.exists():  # incomplete, by an older rule, or of an earlier copy of DOCS
            shutil.rmtree(twin)
        tmp.rename(twin)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _strip_chunk(src: str, dst: str, items: list[tuple[str, str, bool, str | None]]) -> list[str]:
    """Write the originals of (docid, relpath, has_toc, content_hash) items; a None hash means no checkpoint row.
    Each structured file is opened without following links and must be regular (a symlink, FIFO or device is left
    out, its one-line refusal returned); the original is linked from, or read from, that open file."""
    docs, refused, remedy = Below(src), [], REMEDY.format(docs=os.path.dirname(src))
    for docid, rel, has_toc, digest in items:
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
            _write_original(fd, st, f"{src}/{rel}", f"{dst}/{rel}", docid, (has_toc, digest), remedy)
        finally:
            os.close(fd)
    return refused


def _write_original(fd: int, st: os.stat_result, a: str, b: str, docid: str, row: tuple, remedy: str) -> None:
    """The original of the structured file open at `fd` (path `a`), checked against its checkpoint row
    (has_toc, content hash), written at `b`: linked from the open file when it has no TOC."""
    has_toc, digest = row
    text = read_from(fd, st).decode("utf-8")
    where = f"{a} (docid {docid!r})"
    if digest is None:
        raise OriginalMismatch(
            f"{where}: no checkpoint row says whether it holds a TOC; remove the file or finish the run with "
            "the same `rise-batch structure` command"
        )
    original = strip_structure(text) if has_toc else text
    if has_toc and original is text:
        raise OriginalMismatch(f"{where}: its checkpoint row says a TOC was inserted, the file has none; {remedy}")
    if not digest or content_hash(original) != digest:
        raise OriginalMismatch(
            f"{where}: original text does not match the checkpoint's content hash {digest!r} (the file was "
            f"edited, or the checkpoint is another corpus's); {remedy}"
        )
    os.makedirs(os.path.dirname(b), exist_ok=True)
    if original is text:
        try:
            link_from(fd, st, b)
            return
        except OSError:
            pass
    with open(b, "w", encoding="utf-8", newline="") as f:
        f.write(original)
