"""Corpus reading: Parquet file / directory of Parquet shards / JSONL / JSONL.gz, streamed in bounded memory.

A corpus is read twice on purpose. `scan_corpus` makes one cheap pass that checks every row, assigns the
docid -> relpath map and cuts the corpus into shards (row ranges per file). Workers then `read_shard` only their
range. Checking up front means a bad row is reported (or recorded as skipped) before any money is spent, and a
worker never has to know about the rest of the corpus.
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from rise_batch.types import BadRow, Doc

BAD_ROW_POLICIES = ("error", "skip")
DEFAULT_MAX_DOC_CHARS = 5_000_000
_BATCH_ROWS = 1024


class CorpusError(ValueError):
    """Bad input: the message names the file and the row."""


class ShardSpec(NamedTuple):
    """A contiguous row range [start, stop) of one source file; `skip_rows` are rows refused by the scan."""

    shard_id: int
    source: str
    start: int
    stop: int
    byte_offset: int = 0  # plain JSONL only: where row `start` begins
    skip_rows: tuple[int, ...] = ()


def list_sources(path: str | Path) -> list[Path]:
    """The files of a corpus, in a stable order, refusing paths we cannot read."""
    p = Path(path)
    if not p.exists():
        raise CorpusError(f"{p}: corpus path does not exist")
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.is_file() and _format(f) is not None)
        if not files:
            raise CorpusError(f"{p}: directory holds no .parquet, .jsonl or .jsonl.gz files")
        return files
    if _format(p) is None:
        raise CorpusError(f"{p}: unsupported corpus format (expected .parquet, .jsonl, .jsonl.gz)")
    return [p]


def _format(p: Path) -> str | None:
    name = p.name.lower()
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith((".jsonl", ".ndjson")):
        return "jsonl"
    if name.endswith((".jsonl.gz", ".ndjson.gz")):
        return "jsonl.gz"
    return None


def _check_row(rec: dict, source: str, row: int, max_chars: int) -> Doc | BadRow:
    """Turn one raw record into a Doc, or a BadRow saying exactly what is wrong with it."""
    docid = rec.get("docid")
    if docid is None:
        return BadRow(None, source, row, "null docid")
    if not isinstance(docid, str):
        return BadRow(str(docid), source, row, f"non-string docid ({type(docid).__name__})")
    if docid == "" or any(ord(c) < 32 for c in docid):
        return BadRow(docid, source, row, "empty docid or control characters in docid")
    text = rec.get("text")
    if text is None:
        return BadRow(docid, source, row, "null text")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            return BadRow(docid, source, row, f"undecodable text bytes ({e.reason} at byte {e.start})")
    if not isinstance(text, str):
        return BadRow(docid, source, row, f"non-string text ({type(text).__name__})")
    if not text.strip():
        return BadRow(docid, source, row, "empty text")
    if len(text) > max_chars:
        return BadRow(docid, source, row, f"oversized text ({len(text)} chars > {max_chars})")
    url, title = rec.get("url"), rec.get("title")
    return Doc(
        docid,
        text,
        url if isinstance(url, str) else None,
        title if isinstance(title, str) else None,
        source,
        row,
    )


def _raw_rows(src: Path, start: int = 0, stop: int | None = None, byte_offset: int = 0) -> Iterator[dict]:
    """Raw records of rows [start, stop) of one file; each carries `__row`. Raises CorpusError on broken rows."""
    fmt = _format(src)
    if fmt == "parquet":
        yield from _parquet_rows(src, start, stop)
        return
    if fmt == "jsonl" and byte_offset:
        fh: io.BufferedIOBase = open(src, "rb")  # noqa: SIM115 - closed below
        fh.seek(byte_offset)
        row = start
    else:
        fh = gzip.open(src, "rb") if fmt == "jsonl.gz" else open(src, "rb")  # noqa: SIM115
        row = 0
    with fh:
        for raw in fh:
            if stop is not None and row >= stop:
                return
            if row >= start and raw.strip():  # blank lines keep their row number but are not records
                yield _parse_jsonl_line(raw, src, row)
            row += 1


def _parse_jsonl_line(raw: bytes, src: Path, row: int) -> dict:
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return {"__row": row, "__bad": f"undecodable bytes ({e.reason} at byte {e.start} of the line)"}
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as e:
        return {"__row": row, "__bad": f"invalid JSON ({e.msg})"}
    if not isinstance(rec, dict):
        return {"__row": row, "__bad": "row is not a JSON object"}
    rec["__row"] = row
    return rec


def _parquet_rows(src: Path, start: int, stop: int | None) -> Iterator[dict]:
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(src)
    names = set(pf.schema_arrow.names)
    missing = {"docid", "text"} - names
    if missing:
        raise CorpusError(f"{src}: missing required column(s) {sorted(missing)}; has {sorted(names)}")
    cols = [c for c in ("docid", "text", "url", "title") if c in names]
    meta = pf.metadata
    first = 0
    for rg in range(meta.num_row_groups):
        n = meta.row_group(rg).num_rows
        lo, hi = first, first + n
        first = hi
        if hi <= start or (stop is not None and lo >= stop):
            continue
        # stream the group in small batches: a row group can hold millions of rows (GBs of text), and a shard
        # only needs its own range, so stop as soon as it is read
        for batch in pf.iter_batches(_BATCH_ROWS, row_groups=[rg], columns=cols):
            if lo + batch.num_rows > start:
                for i, rec in enumerate(batch.to_pylist()):
                    row = lo + i
                    if stop is not None and row >= stop:
                        return
                    if row >= start:
                        rec["__row"] = row
                        yield rec
            lo += batch.num_rows
            if stop is not None and lo >= stop:
                return


def iter_rows(
    src: Path,
    start: int = 0,
    stop: int | None = None,
    byte_offset: int = 0,
    max_chars: int = DEFAULT_MAX_DOC_CHARS,
) -> Iterator[Doc | BadRow]:
    """Checked rows of one file: a Doc or a BadRow for every row, nothing dropped silently."""
    for rec in _raw_rows(src, start, stop, byte_offset):
        row = rec.pop("__row")
        if "__bad" in rec:
            yield BadRow(None, str(src), row, rec["__bad"])
        else:
            if _format(src) != "parquet" and "docid" in rec and "text" not in rec:
                yield BadRow(str(rec.get("docid")), str(src), row, "missing column 'text'")
                continue
            yield _check_row(rec, str(src), row, max_chars)


def iter_docs(path: str | Path, on_bad_row: str = "error", max_chars: int = DEFAULT_MAX_DOC_CHARS) -> Iterator[Doc]:
    """Every valid document of a corpus, streamed; duplicates and bad rows raise or are skipped by policy."""
    if on_bad_row not in BAD_ROW_POLICIES:
        raise ValueError(f"on_bad_row must be one of {BAD_ROW_POLICIES}, got {on_bad_row!r}")
    seen: dict[str, tuple[str, int]] = {}
    for src in list_sources(path):
        for item in iter_rows(src, max_chars=max_chars):
            if isinstance(item, BadRow):
                if on_bad_row == "error":
                    raise CorpusError(f"{item.source}: row {item.row}: {item.reason}")
                continue
            if item.docid in seen:
                if on_bad_row == "error":
                    f, r = seen[item.docid]
                    raise CorpusError(
                        f"{item.source}: row {item.row}: duplicate docid {item.docid!r} (first at {f} row {r})"
                    )
                continue
            seen[item.docid] = (item.source, item.row)
            yield item


def read_shard(spec: ShardSpec, max_chars: int = DEFAULT_MAX_DOC_CHARS) -> Iterator[Doc]:
    """The valid documents of one shard, as the scan judged them (refused rows are skipped here)."""
    skip = set(spec.skip_rows)
    for item in iter_rows(Path(spec.source), spec.start, spec.stop, spec.byte_offset, max_chars):
        if item.row in skip:
            continue
        if isinstance(item, BadRow):  # the file changed since the scan: refuse loudly
            raise CorpusError(f"{item.source}: row {item.row}: {item.reason} (corpus changed since the scan?)")
        yield item
