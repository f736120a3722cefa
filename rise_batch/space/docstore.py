"""A materialized corpus as the workspaces see it: DIR/corpus/<relpath> files and the docid -> relpath map.

Every relpath is checked before any join below corpus/, and each document is opened below it without following
links (space/safe_open.py), so a crafted docs dir cannot lead a workspace, a preview or a read outside.
"""

from __future__ import annotations

import errno
from collections.abc import Mapping
from pathlib import Path

from rise_batch.corpus import docmap_table
from rise_batch.corpus.docmap import check_relpaths, checked_columns
from rise_batch.safe_read import read_parquet
from rise_batch.space.safe_open import Below
from rise_batch.storage import ObjectPath, location

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

    def relpaths_of(self, docids: list[str]) -> list[str | None]:
        """The relpath of each docid (None where there is none): the mapped docmap's batch lookup, in numpy."""
        if isinstance(self.relpath, docmap_table.MappedDocmap):
            return self.relpath.get_many(docids)
        return [self.relpath.get(d) for d in docids]

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
    columns = ["docid", "relpath"]
    # a local docmap: its size checked against the run's record before it is read
    table = (
        read_parquet(path, columns)
        if isinstance(path, ObjectPath)
        else docmap_table.read_docmap_columns(docs_dir, columns)
    )
    docids, rels = checked_columns(table, f"{path}: refusing this docs dir")
    return dict(zip(docids, rels, strict=True))
