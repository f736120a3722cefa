"""An index's strings as memory-mapped tables: row -> docid, and term -> vocabulary id.

`docids.json` and bm25s's `vocab.index.json` stay the index's files (stock `bm25s.BM25.load` and older readers open
them); beside them, `docids.strtab` and `vocab.strtab` (rise_batch.strtable) hold the same strings in a form every
process of a node maps instead of holding: at 1M documents the docid list and a vocabulary of a few million terms
(with bm25s's set of their ids) were ~0.5 GB of Python objects in each trajectory actor. The build writes both
tables; an index built before them gets them on first load, derived from its JSON files.

The JSON files are read whole to derive a table, so each is read with the size meta.json records for it (`files`,
written by the build) as its bound: a docids.json grown or replaced since (a 3 GB sparse file) is refused in one
line before any of it is read, never read until memory runs out.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from rise_batch.index.retriever_kinds import DOCIDS_FILE as DOCIDS_FILE  # every index's rule, stated there
from rise_batch.safe_read import Recorded, check_size, open_regular, read_json_file
from rise_batch.strtable import KeyedColumn, StrColumn, derived_table, source_stamp, write_table

META_FILE = "meta.json"
FILES_KEY = "files"  # meta.json's record of each file's size (name -> bytes)
VOCAB_JSON = "vocab.index.json"  # bm25s's name
DOCIDS_TABLE = "docids.strtab"
VOCAB_TABLE = "vocab.strtab"


class Vocabulary(KeyedColumn[int]):
    """term -> id over a mapped table whose row i holds the term of id i (bm25s's ids are 0..n-1)."""

    def __init__(self, terms: StrColumn) -> None:
        super().__init__(terms)
        self.terms = terms

    def value(self, row: int) -> int:
        return row


def _dense(vocab: Mapping[str, int], where: str) -> list[str]:
    """Terms in id order; refuses a vocabulary whose ids are not exactly 0..n-1."""
    terms: list[str | None] = [None] * len(vocab)
    for t, i in vocab.items():
        if not (isinstance(i, int) and 0 <= i < len(terms)) or terms[i] is not None:
            raise ValueError(f"{where}: vocabulary ids are not 0..{len(terms) - 1} (term {t!r} has id {i!r})")
        terms[i] = t
    return terms  # type: ignore[return-value]


def write_docid_table(index_dir: str | Path, docids: Sequence[str]) -> None:
    """docids.strtab for the docids.json just written beside it (at build time)."""
    d = Path(index_dir)
    write_table(d / DOCIDS_TABLE, {"docid": (docids, False)}, {"source": _stamp(d / DOCIDS_FILE)})


def write_vocab_table(index_dir: str | Path, vocab: Mapping[str, int]) -> None:
    """vocab.strtab for the vocab.index.json just written beside it (at build time)."""
    d = Path(index_dir)
    terms = _dense(vocab, str(d / VOCAB_JSON))
    write_table(d / VOCAB_TABLE, {"term": (terms, True)}, {"source": _stamp(d / VOCAB_JSON)})


def _stamp(source: Path) -> dict:
    return source_stamp(source, source.read_bytes())


def file_sizes(index_dir: str | Path) -> dict[str, int]:
    """name -> bytes of each file of a just-built index directory: what meta.json records under `files`."""
    return {p.name: p.stat().st_size for p in sorted(Path(index_dir).iterdir()) if p.is_file()}


def recorded_size(index_dir: str | Path, name: str) -> Recorded | None:
    """The size meta.json records for the index file `name`, or None (an index built before sizes were recorded,
    or without meta.json: the generic bound of safe_read applies)."""
    d = Path(index_dir)
    try:
        meta = read_json_file(d / META_FILE, below=d)
    except FileNotFoundError:
        return None
    files = meta.get(FILES_KEY) if isinstance(meta, dict) else None
    size = files.get(name) if isinstance(files, dict) else None
    return Recorded(size, str(d / META_FILE)) if type(size) is int else None


def read_docids(index_dir: str | Path) -> list:
    """docids.json of an index, read whole once its size is the one meta.json records (refused before any read
    otherwise)."""
    d = Path(index_dir)
    with open_regular(d / DOCIDS_FILE, below=d) as f:
        check_size(d / DOCIDS_FILE, os.fstat(f.fileno()).st_size, recorded_size(d, DOCIDS_FILE))
        data = f.read()
    try:
        return json.loads(data)
    except ValueError as e:
        raise ValueError(f"{d / DOCIDS_FILE} is not valid JSON ({e}): rebuild the index") from None


def docid_table(index_dir: str | Path) -> StrColumn:
    """Row -> docid of an index, mapped (derived from docids.json if missing or stale)."""
    d = Path(index_dir)

    def derive(data: bytes) -> dict:
        docids = json.loads(data)
        if not isinstance(docids, list) or not all(isinstance(x, str) for x in docids):
            raise ValueError(f"{d / DOCIDS_FILE}: expected a JSON list of docid strings")
        return {"docid": (docids, False)}

    table = derived_table(d / DOCIDS_TABLE, d / DOCIDS_FILE, derive, recorded=recorded_size(d, DOCIDS_FILE))
    return table.columns["docid"]


def vocabulary(index_dir: str | Path) -> Vocabulary:
    """Term -> id of a bm25s index, mapped (derived from vocab.index.json if missing or stale)."""
    d = Path(index_dir)

    def derive(data: bytes) -> dict:
        return {"term": (_dense(json.loads(data), str(d / VOCAB_JSON)), True)}

    table = derived_table(d / VOCAB_TABLE, d / VOCAB_JSON, derive, recorded=recorded_size(d, VOCAB_JSON))
    return Vocabulary(table.columns["term"])
