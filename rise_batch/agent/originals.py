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

import os
from pathlib import Path

from rise_batch.agent.view_files import COMPLETE, build_files, checkpoint_outcomes, lock_name
from rise_batch.agent.views import ORIGINAL, VIEWS, view_docs
from rise_batch.space.safe_open import link_from, read_from
from rise_batch.structure.backends import content_hash
from rise_batch.structure.render import strip_structure

ORIGINAL_DIR = str(VIEWS[ORIGINAL].dir)
LOCK = lock_name(ORIGINAL_DIR)  # in DOCS: one build at a time per node
# The marker's content: a twin built by an older rule (text-guessed stripping, unchecked) is rebuilt, not reused.
BUILD_RULE = VIEWS[ORIGINAL].rule
REMEDY = "re-create the structured files with `rise-batch materialize {docs}`, then re-run"


class OriginalMismatch(ValueError):
    """A structured file that does not give back the corpus text its checkpoint row recorded."""


__all__ = ["COMPLETE", "LOCK", "ORIGINAL_DIR", "OriginalMismatch", "build_original", "original_docs"]


def original_docs(docs_dir: str | Path, workers: int = 2) -> Path:
    """The docs dir holding original text: DOCS/original (built on first use, agent/view_files.py) or DOCS itself if
    never structured."""
    return view_docs(VIEWS[ORIGINAL], docs_dir, workers)


def build_original(docs: Path, tmp: Path, workers: int) -> None:
    """The view's builder: TMP/corpus/<relpath>, the original of every structured file, checked."""
    build_files(docs, tmp, workers, checkpoint_outcomes(docs), _write_original)


def _write_original(fd: int, st: os.stat_result, src: str, dst: str, rel: str, docid: str, row: tuple | None) -> None:
    """The original of the structured file open at `fd` (SRC/REL), checked against its checkpoint row (has_toc,
    content hash; None: no row), written at DST/REL: linked from the open file when it has no TOC."""
    has_toc, digest = row or (False, None)
    a, b, remedy = f"{src}/{rel}", f"{dst}/{rel}", REMEDY.format(docs=os.path.dirname(src))
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
