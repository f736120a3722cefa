"""The original-text twin of a structured docs directory, for the systems that must not see tables of contents.

RISE-BM25, the retrieval agent and DCI read the documents as they were. The structure job writes structured files
only, and a TOC can be removed exactly (DESIGN.md's invariant), so the twin is derived from them: same relpaths,
same docmap, TOC block and inserted headings removed. Files without a TOC are hardlinked, not copied. The twin is
built once, into DOCS/original/, and marked complete only at the end, so an interrupted build is redone.
"""

from __future__ import annotations

import os
import shutil
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from rise_batch.space.workspace import DocStore

ORIGINAL_DIR = "original"
COMPLETE = ".complete"
_CHUNK = 2000


def is_structure_output(docs_dir: Path) -> bool:
    """A `rise-batch structure` output (structured files), as opposed to a plain materialized corpus."""
    return (docs_dir / "manifest.json").is_file() and (docs_dir / "checkpoint").is_dir()


def original_docs(docs_dir: str | Path, workers: int = 2) -> Path:
    """The docs dir holding original text: DOCS/original (built on first use) or DOCS itself if never structured."""
    docs = Path(docs_dir)
    twin = docs / ORIGINAL_DIR
    if (twin / COMPLETE).exists():
        return twin
    if not is_structure_output(docs):
        return docs
    store = DocStore(docs)
    if twin.exists():
        shutil.rmtree(twin)
    (twin / "corpus").mkdir(parents=True)
    rels = list(store.relpath.values())
    chunks = [rels[i : i + _CHUNK] for i in range(0, len(rels), _CHUNK)]
    src, dst = str(store.corpus_dir), str(twin / "corpus")
    if workers > 1 and len(chunks) > 1:
        with ProcessPoolExecutor(workers) as pool:
            list(pool.map(_strip_chunk, [src] * len(chunks), [dst] * len(chunks), chunks))
    else:
        for chunk in chunks:
            _strip_chunk(src, dst, chunk)
    shutil.copyfile(docs / "docmap.parquet", twin / "docmap.parquet")
    (twin / COMPLETE).touch()
    return twin


def _strip_chunk(src: str, dst: str, rels: list[str]) -> int:
    from rise_batch.structure.render import strip_structure

    for rel in rels:
        a, b = f"{src}/{rel}", f"{dst}/{rel}"
        os.makedirs(os.path.dirname(b), exist_ok=True)
        try:
            with open(a, encoding="utf-8", newline="") as f:
                text = f.read()
        except FileNotFoundError:
            continue
        original = strip_structure(text)
        if original is text:
            try:
                os.link(a, b)
                continue
            except OSError:
                pass
        with open(b, "w", encoding="utf-8", newline="") as f:
            f.write(original)
    return len(rels)
