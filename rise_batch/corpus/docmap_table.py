"""docid <-> relpath of a docs directory as a memory-mapped table, shared by every process of a node.

At 1M documents the map as two Python dicts (docid -> relpath, and its reverse for the agent's paths) cost each
trajectory actor ~0.45 GB. `DOCS/docmap.strtab` (rise_batch.strtable) holds both columns with a hash index each;
it is derived from `docmap.parquet` on first use, every relpath checked then, exactly as the Parquet reader checks
them, and derived again whenever docmap.parquet changes. Each relpath is checked again when it is handed out (the
fast path of `relpath_problem`, well under a microsecond), so a table altered after it was written is refused
where it is read, as an altered docmap is.

docmap.parquet is read with the size the `structure` run recorded for it in manifest.json (`files`) as its bound,
and through pyarrow from the opened file (its footer first), never read whole into memory: a docmap grown or
replaced since (a 3 GB sparse file) is refused in one line before it is read.
"""

from __future__ import annotations

import os
from collections.abc import ItemsView, Iterator, ValuesView
from pathlib import Path
from typing import Any

from rise_batch.corpus.docmap import REMEDY_DOCMAP, UnsafePathError, checked_columns, relpath_problem
from rise_batch.io import JSON_FILE_MAX_BYTES
from rise_batch.safe_read import Recorded, RefusedFile, check_size, open_regular, read_json_file
from rise_batch.strtable import KeyedColumn, StrColumn, derived_table

DOCMAP_TABLE = "docmap.strtab"
DOCMAP_FILE = "docmap.parquet"
MANIFEST_FILE = "manifest.json"  # a structure run's (structuring/job.py writes it after docmap.parquet)
FILES_KEY = "files"  # the manifest's record of each file's size (name -> bytes)


class MappedDocmap(KeyedColumn[str]):
    """docid -> relpath (a Mapping, in docmap order) and `docid(relpath)`, over one mapped table."""

    def __init__(self, docids: StrColumn, relpaths: StrColumn, where: str) -> None:
        super().__init__(docids)
        self.docids, self.relpaths, self.where = docids, relpaths, where
        self._rel_buf, self._rel_off = relpaths.parts

    def value(self, row: int) -> str:
        rel = self.relpaths[row]
        if not _plainly_safe(rel) and relpath_problem(rel) is not None:
            raise UnsafePathError(f"{self.where}: row {row}: unsafe path {rel[:200]!r}; {REMEDY_DOCMAP}")
        return rel

    def get(self, docid: str, default: str | None = None) -> str | None:  # type: ignore[override]
        """`value(find(docid))` in one frame: Workspace.add calls it for each of a search's ~3,000 hits."""
        row = self.docids.find(docid) if isinstance(docid, str) else None
        if row is None:
            return default
        off = self._rel_off
        rel = self._rel_buf[off[row] : off[row + 1]].decode("utf-8", "surrogatepass")
        return rel if _plainly_safe(rel) else self.value(row)

    def get_many(self, docids: list[str]) -> list[str | None]:
        """`get` of every docid at once (rise_batch.strtable_batch): a search's union in one numpy pass."""
        if not all(isinstance(d, str) for d in docids):
            return [self.get(d) for d in docids]
        rows = self.docids.find_many(docids)
        held = (rows >= 0).nonzero()[0]
        rels = self.relpaths.take_many(rows[held])
        if not _all_plainly_safe(rels):
            rels = [rel if _plainly_safe(rel) else self.value(int(r)) for rel, r in zip(rels, rows[held], strict=True)]
        if len(rels) == len(docids):
            return rels  # type: ignore[return-value]
        out: list[str | None] = [None] * len(docids)
        for i, rel in zip(held.tolist(), rels, strict=True):
            out[i] = rel
        return out

    def items(self) -> ItemsView[str, str]:
        return _Items(self)

    def values(self) -> ValuesView[str]:
        return _Values(self)

    def docid(self, relpath: str) -> str | None:
        """The document whose file is `relpath`, or None."""
        row = self.relpaths.find(relpath) if isinstance(relpath, str) else None
        return None if row is None else self.docids[row]


def _plainly_safe(rel: str) -> bool:
    """A sufficient test for `relpath_problem(rel) is None`, in C string methods: printable ASCII, at most 255 bytes,
    no empty component, none starting with a dot, no backslash. Anything else takes the full check."""
    return (
        rel.isascii()
        and rel.isprintable()
        and 0 < len(rel) <= 255
        and rel[0] not in "./"
        and rel[-1] != "/"
        and "/." not in rel
        and "//" not in rel
        and "\\" not in rel
    )


def _all_plainly_safe(rels: list[str]) -> bool:
    """`_plainly_safe` of every relpath, tested on them joined by spaces (a few C scans, not a call each). A space
    inside a relpath can only make it say False (then each is tested alone), never pass a relpath that is not."""
    if not rels:
        return True
    text = " ".join(rels)
    return (
        text.isascii()
        and text.isprintable()
        and 0 < min(map(len, rels))
        and max(map(len, rels)) <= 255
        and text[0] not in "./"
        and text[-1] != "/"
        and not any(bad in text for bad in (" .", " /", "/ ", "/.", "//", "\\"))
    )


class _Items(ItemsView):
    def __iter__(self) -> Iterator[tuple[str, str]]:
        m: MappedDocmap = self._mapping  # type: ignore[assignment]
        return zip(m.docids, map(m.value, range(len(m))), strict=True)


class _Values(ValuesView):
    def __iter__(self) -> Iterator[str]:
        m: MappedDocmap = self._mapping  # type: ignore[assignment]
        return map(m.value, range(len(m)))


def recorded_docmap_size(docs_dir: str | Path) -> Recorded | None:
    """The size the docs dir's manifest.json records for docmap.parquet, or None (a docs dir made by hand, or by a
    run from before sizes were recorded)."""
    d = Path(docs_dir)
    try:
        manifest = read_json_file(d / MANIFEST_FILE, below=d, max_bytes=JSON_FILE_MAX_BYTES)
    except FileNotFoundError:
        return None
    files = manifest.get(FILES_KEY) if isinstance(manifest, dict) else None
    size = files.get(DOCMAP_FILE) if isinstance(files, dict) else None
    return Recorded(size, str(d / MANIFEST_FILE)) if type(size) is int else None


def read_docmap_columns(docs_dir: str | Path, columns: list[str]) -> Any:
    """`columns` of DOCS/docmap.parquet as a pyarrow Table, its size checked against the record first, read by
    pyarrow from the opened file (the footer, then those columns' chunks): a file that is not Parquet is refused,
    naming it, without being read."""
    d = Path(docs_dir)
    with open_regular(d / DOCMAP_FILE, below=d) as f:
        return _read_checked(f, d / DOCMAP_FILE, columns, recorded_docmap_size(d))


def _read_checked(f: Any, path: Path, columns: list[str], recorded: Recorded | None) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    check_size(path, os.fstat(f.fileno()).st_size, recorded)
    try:
        with pa.OSFile(f"/proc/self/fd/{f.fileno()}") as src:  # the very file checked, read natively
            return pq.read_table(src, columns=columns)
    except pa.ArrowInvalid as e:
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise RefusedFile(f"{path} is not a Parquet docmap ({why}): restore it, or run `structure` again") from None


def mapped_docmap(docs_dir: str | Path) -> MappedDocmap:
    """The docmap of a docs dir as a MappedDocmap; its table is derived beside docmap.parquet when missing or stale.

    Refuses what the Parquet reader refuses (an unsafe relpath, invalid UTF-8), and a docid or relpath listed
    twice (two documents would share one file)."""
    path = Path(docs_dir) / DOCMAP_FILE
    if not path.exists():
        raise FileNotFoundError(f"no docmap.parquet in {docs_dir} (written by `rise-batch structure`)")
    where = f"{path}: refusing this docs dir"

    recorded = recorded_docmap_size(docs_dir)

    def derive(f: Any) -> dict:
        docids, rels = checked_columns(_read_checked(f, path, ["docid", "relpath"], recorded), where)
        bad = next((i for i, d in enumerate(docids) if not isinstance(d, str) or not d), None)
        if bad is not None:
            raise UnsafePathError(f"{where}: row {bad}: docid {docids[bad]!r} is not a docid; {REMEDY_DOCMAP}")
        for name, values in (("docid", docids), ("relpath", rels)):
            if len(set(values)) != len(values):
                seen: set = set()
                twice = next(v for v in values if v in seen or seen.add(v))
                raise UnsafePathError(f"{where}: {name} {twice!r} is listed twice; {REMEDY_DOCMAP}")
        return {"docid": (docids, True), "relpath": (rels, True)}

    table = derived_table(path.with_name(DOCMAP_TABLE), path, derive, recorded=recorded, whole=False)
    return MappedDocmap(table.columns["docid"], table.columns["relpath"], f"{path.with_name(DOCMAP_TABLE)}")
