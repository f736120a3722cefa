"""Corpus reading: Parquet file / directory of Parquet shards / JSONL / JSONL.gz, streamed in bounded memory.

A corpus is read twice on purpose. `scan_corpus` makes one cheap pass that checks every row, assigns the
docid -> relpath map and cuts the corpus into shards (row ranges per file). Workers then `read_shard` only their
range. Checking up front means a bad row is reported (or recorded as skipped) before any money is spent, and a
worker never has to know about the rest of the corpus.

Formats are a registry (`FORMATS`: name, file-name suffixes, row reader, capabilities). Row checks, scan, shards,
the index plan, plan sampling, help, errors and the guides' list only ask the registry, so adding a format is one row
reader and one `FORMATS.add(...)`.

Everything the scan accepts can be written and sent later: every string field must encode as UTF-8 (a JSON escape
such as "\\ud800" decodes to a lone surrogate that crashes the first Parquet write or HTTP request, after money was
spent), and a file that cannot be read (truncated gzip or Parquet, a `.gz` that is not gzip) is one CorpusError
naming it. Columns with other names (`id`, `contents`) are mapped by a `columns` spec ("docid=id,text=contents").
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import NamedTuple

from rise_batch.registry import Registry
from rise_batch.storage import AnyPath, arrow_source, location, open_binary
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
    columns: str = ""  # canonical column spec (see `canonical_columns`): the shard reads exactly as the scan did


class RawRow(NamedTuple):
    """One row as a format's reader yields it: its row number, and its record (source column names) or why it has
    none (undecodable bytes, invalid JSON, not an object)."""

    row: int
    record: dict | None
    bad: str | None = None


FIELDS = ("docid", "text", "url", "title")
COLUMNS_HELP = "read fields from other columns, e.g. 'docid=id,text=contents' (fields: docid, text, url, title)"


class Columns(NamedTuple):
    """The source column each document field is read from."""

    docid: str = "docid"
    text: str = "text"
    url: str = "url"
    title: str = "title"


DEFAULT_COLUMNS = Columns()


def column_map(spec: str | None) -> Columns:
    """Parse 'docid=id,text=contents' (unnamed fields keep their own name); ValueError naming what is wrong.

    One syntax for the --columns flag of structure, index and plan and the `columns` config key."""
    pairs: dict[str, str] = {}
    for part in (spec or "").split(","):
        if not part.strip():
            continue
        field, sep, column = (x.strip() for x in part.partition("="))
        if not sep or field not in FIELDS or not column:
            raise ValueError(f"columns: {part.strip()!r} is not FIELD=COLUMN with FIELD one of {', '.join(FIELDS)}")
        if field in pairs:
            raise ValueError(f"columns: {field} is mapped twice")
        pairs[field] = column
    cols = Columns(**pairs)
    if len(set(cols)) < len(FIELDS):
        raise ValueError(f"columns: two fields read the same column in {spec!r}")
    return cols


def canonical_columns(spec: str | None) -> str:
    """The spec with identity entries dropped, in field order: '' means the default names (so it hashes stably)."""
    return ",".join(f"{f}={c}" for f, c in zip(FIELDS, column_map(spec), strict=True) if c != f)


def _missing_column(field: str, cols: Columns, have: list[str]) -> str:
    """The reason for a record or file without a required column: what it lacks, what it has, the remedy."""
    col = getattr(cols, field)
    named = field if col == field else f"{col!r} column (for {field})"
    shown = ", ".join(have[:20]) + (", ..." if len(have) > 20 else "")
    return f"no {named} column; the rows have [{shown}] (name the columns with --columns docid=COL,text=COL)"


def _utf8_problem(s: str) -> str | None:
    """Why `s` cannot be encoded as UTF-8 (a lone surrogate from a JSON escape), or None; ASCII is checked fast."""
    if s.isascii():
        return None
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"U+{ord(s[e.start]):04X} at char {e.start}"
    return None


def printable(s: str) -> str:
    """`s` with unencodable characters escaped (\\ud800): safe to store in Parquet and print in an error."""
    return s.encode("utf-8", "backslashreplace").decode("utf-8")


@contextmanager
def file_errors(src: AnyPath) -> Iterator[None]:
    """Turn what a truncated or mislabelled file raises (gzip, zlib, Arrow, I/O) into one CorpusError naming it."""
    try:
        yield
    except CorpusError:
        raise
    except Exception as e:
        what = _read_failure(e)
        if what is None:
            raise
        detail = " ".join(str(e).split())
        raise CorpusError(f"{src}: {what} ({detail}); re-create or re-download the file") from e


def _read_failure(e: Exception) -> str | None:
    if isinstance(e, gzip.BadGzipFile):
        return "not a gzip file despite its name"
    if isinstance(e, (EOFError, zlib.error)):
        return "truncated or corrupt gzip data"
    if isinstance(e, UnicodeDecodeError):
        return "undecodable text in the file"
    import pyarrow as pa

    if isinstance(e, pa.ArrowException):
        return "not a readable Parquet file (truncated or corrupt)"
    if isinstance(e, OSError):
        return "cannot read the file"
    return None


def open_parquet(src: AnyPath):
    """pyarrow.parquet.ParquetFile(src) (a file or an object), or a CorpusError naming a truncated or corrupt file."""
    import pyarrow.parquet as pq

    path, fs = arrow_source(src)
    with file_errors(src):
        return pq.ParquetFile(path, filesystem=fs)


def list_sources(path: str | AnyPath) -> list[AnyPath]:
    """The files of a corpus (a path, or a URI such as s3://bucket/prefix), in a stable order, refusing paths we
    cannot read."""
    p = location(path)
    if not p.exists():
        raise CorpusError(f"{p}: corpus path does not exist")
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.is_file() and format_of(f) is not None)
        if not files:
            raise CorpusError(f"{p}: directory holds no corpus files (expected {formats_phrase()})")
        return files
    if format_of(p) is None:
        raise CorpusError(f"{p}: unsupported corpus format (expected {formats_phrase()})")
    return [p]


def format_of(p: AnyPath) -> CorpusFormat | None:
    """The format a file's name selects (first match in FORMATS), or None for a file that is not corpus."""
    name = p.name.lower()
    return next((f for f in FORMATS.values() if name.endswith(f.suffixes)), None)


def source_format(src: AnyPath) -> CorpusFormat:
    """The format of a file that `list_sources` accepted; CorpusError for any other file."""
    fmt = format_of(src)
    if fmt is None:
        raise CorpusError(f"{src}: unsupported corpus format (expected {formats_phrase()})")
    return fmt


def _check_row(rec: dict, source: str, row: int, max_chars: int) -> Doc | BadRow:
    """Turn one raw record (fields under their own names) into a Doc, or a BadRow saying exactly what is wrong."""
    docid = rec.get("docid")
    if docid is None:
        return BadRow(None, source, row, "null docid")
    if not isinstance(docid, str):
        return BadRow(str(docid), source, row, f"non-string docid ({type(docid).__name__})")
    if docid == "" or any(ord(c) < 32 for c in docid):
        return BadRow(printable(docid), source, row, "empty docid or control characters in docid")
    for field in FIELDS:  # every string that will be written or sent must encode as UTF-8
        value = rec.get(field)
        problem = _utf8_problem(value) if isinstance(value, str) else None
        if problem:
            return BadRow(printable(docid), source, row, f"lone surrogate in {field} ({problem}): not valid UTF-8")
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


def _jsonl_rows(
    src: AnyPath, start: int = 0, stop: int | None = None, byte_offset: int = 0, cols: Columns = DEFAULT_COLUMNS
) -> Iterator[RawRow]:
    """Rows of a plain JSONL file; a shard's `byte_offset` (where row `start` begins) saves re-reading the head."""
    fh = open_binary(src)  # closed by _line_rows
    if byte_offset:
        fh.seek(byte_offset)
    yield from _line_rows(fh, src, start, stop, start if byte_offset else 0)


def _jsonl_gz_rows(
    src: AnyPath, start: int = 0, stop: int | None = None, byte_offset: int = 0, cols: Columns = DEFAULT_COLUMNS
) -> Iterator[RawRow]:
    """Rows of a gzipped JSONL file, always read from the start (gzip cannot seek)."""
    yield from _line_rows(_open_gz(src), src, start, stop, 0)


def _open_gz(src: AnyPath, mode: str = "rb") -> gzip.GzipFile:
    """A gzip reader of a file or an object; closing it closes the underlying file too."""
    raw = open_binary(src)
    fh = gzip.GzipFile(fileobj=raw, mode="rb")
    fh.myfileobj = raw  # GzipFile closes what it opened itself: make the object's reader that
    return fh


def _line_rows(fh: io.BufferedIOBase, src: AnyPath, start: int, stop: int | None, row: int) -> Iterator[RawRow]:
    """Records of lines [start, stop) of an open JSONL stream positioned at line `row`; closes the stream."""
    with fh:
        for raw in fh:
            if stop is not None and row >= stop:
                return
            if row >= start and raw.strip():  # blank lines keep their row number but are not records
                yield _parse_jsonl_line(raw, src, row)
            row += 1


def _parse_jsonl_line(raw: bytes, src: AnyPath, row: int) -> RawRow:
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return RawRow(row, None, f"undecodable bytes ({e.reason} at byte {e.start} of the line)")
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as e:
        return RawRow(row, None, f"invalid JSON ({e.msg})")
    if not isinstance(rec, dict):
        return RawRow(row, None, "row is not a JSON object")
    return RawRow(row, rec)


def parquet_columns(src: AnyPath, pf, cols: Columns) -> list[str]:
    """The source columns of `cols` that the file has; CorpusError when it lacks docid or text."""
    names = pf.schema_arrow.names
    for field in ("docid", "text"):
        if getattr(cols, field) not in names:
            raise CorpusError(f"{src}: {_missing_column(field, cols, names)}")
    return [c for c in cols if c in names]


def _parquet_rows(
    src: AnyPath, start: int = 0, stop: int | None = None, byte_offset: int = 0, cols: Columns = DEFAULT_COLUMNS
) -> Iterator[RawRow]:
    """Rows of a Parquet file, decoding only the row groups that hold [start, stop); `byte_offset` is unused."""
    pf = open_parquet(src)
    wanted = parquet_columns(src, pf, cols)
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
        for batch in pf.iter_batches(_BATCH_ROWS, row_groups=[rg], columns=wanted):
            if lo + batch.num_rows > start:
                for i, rec in enumerate(batch.to_pylist()):
                    row = lo + i
                    if stop is not None and row >= stop:
                        return
                    if row >= start:
                        yield RawRow(row, rec)
            lo += batch.num_rows
            if stop is not None and lo >= stop:
                return


def _count_lines(src: AnyPath, opener: Callable[[AnyPath], io.BufferedIOBase] = open_binary) -> int:
    """Rows of a line-based file without parsing JSON: its newlines, plus an unterminated last line."""
    n, last = 0, b"\n"
    with opener(src) as fh:
        while chunk := fh.read(1 << 22):
            n += chunk.count(b"\n")
            last = chunk[-1:]
    return n + (last != b"\n")


def _parquet_count(src: AnyPath) -> int:
    return open_parquet(src).metadata.num_rows


RowReader = Callable[[AnyPath, int, int | None, int, Columns], Iterator[RawRow]]


@dataclass(frozen=True, kw_only=True)
class CorpusFormat:
    """One corpus file format: the file names that select it, how its rows are read, and what it can do.

    Everything else (row checks, scan, shards, index plan, sampling, help and errors, the guides' list) is generic
    over this, so a new format is one row reader plus one `FORMATS.add(...)`. The capabilities only make a format
    faster, never correct: a format that claims none is read whole, once per shard."""

    name: str
    label: str  # how help, errors and the guides name it ("Parquet")
    suffixes: tuple[str, ...]  # lower-case file-name endings; the first is the one short messages show
    # (src, start, stop, byte_offset, columns) -> a RawRow for each row of [start, stop); `columns` says which source
    # columns hold the fields (a reader returning whole records may ignore it)
    read_rows: RowReader
    count_rows: Callable[[AnyPath], int] | None = None  # fast row count; None: read the file once
    seekable_lines: bool = False  # rows are the lines of a plain file: a shard may start at a byte offset
    row_groups: bool = False  # a Parquet-style footer gives row groups and their sizes: shards and samples follow them


FORMATS: Registry[CorpusFormat] = Registry(
    "corpus format",
    [
        CorpusFormat(
            name="parquet", label="Parquet", suffixes=(".parquet",), read_rows=_parquet_rows,
            count_rows=_parquet_count, row_groups=True,
        ),
        CorpusFormat(
            name="jsonl", label="JSONL", suffixes=(".jsonl", ".ndjson"), read_rows=_jsonl_rows,
            count_rows=_count_lines, seekable_lines=True,
        ),
        CorpusFormat(
            name="jsonl.gz", label="gzipped JSONL", suffixes=(".jsonl.gz", ".ndjson.gz"), read_rows=_jsonl_gz_rows,
            count_rows=partial(_count_lines, opener=_open_gz),
        ),
    ],
)  # fmt: skip


def formats_phrase() -> str:
    """The registered formats as help and errors say them: "Parquet (.parquet), JSONL (.jsonl, .ndjson) or ..."."""
    named = [f"{f.label} ({', '.join(f.suffixes)})" for f in FORMATS.values()]
    return named[0] if len(named) == 1 else f"{', '.join(named[:-1])} or {named[-1]}"


def corpus_help() -> str:
    """The --corpus help of every command that reads a corpus."""
    return f"a corpus file or a directory of them: {formats_phrase()}; fields docid, text, url?, title?"


def count_rows(src: AnyPath) -> int:
    """Rows of one corpus file (row numbers run 0..count-1), as cheaply as its format allows."""
    fmt = source_format(src)
    with file_errors(src):
        if fmt.count_rows is not None:
            return fmt.count_rows(src)
        return max((raw.row + 1 for raw in fmt.read_rows(src, 0, None, 0, DEFAULT_COLUMNS)), default=0)


def iter_rows(
    src: AnyPath,
    start: int = 0,
    stop: int | None = None,
    byte_offset: int = 0,
    max_chars: int = DEFAULT_MAX_DOC_CHARS,
    columns: str = "",
) -> Iterator[Doc | BadRow]:
    """Checked rows of one file: a Doc or a BadRow for every row, nothing dropped silently.

    `columns` maps fields to source columns ("docid=id,text=contents"); a file that cannot be read is one
    CorpusError naming it, wherever in the file the damage is."""
    fmt = source_format(src)
    cols = column_map(columns)
    with file_errors(src):
        for raw in fmt.read_rows(src, start, stop, byte_offset, cols):
            if raw.record is None:
                yield BadRow(None, str(src), raw.row, raw.bad or "unreadable row")
                continue
            yield check_record(raw.record, str(src), raw.row, cols, max_chars)


def check_record(
    rec: dict, source: str, row: int, cols: Columns, max_chars: int = DEFAULT_MAX_DOC_CHARS
) -> Doc | BadRow:
    """One raw record (source column names) as a Doc, or a BadRow naming a missing column or what else is wrong."""
    missing = [f for f in ("docid", "text") if getattr(cols, f) not in rec]
    if missing:
        docid = rec.get(cols.docid)
        return BadRow(
            printable(docid) if isinstance(docid, str) else None,
            source,
            row,
            _missing_column(missing[0], cols, list(rec)),
        )
    if cols != DEFAULT_COLUMNS:
        rec = {f: rec[c] for f, c in zip(FIELDS, cols, strict=True) if c in rec}
    return _check_row(rec, source, row, max_chars)


def iter_docs(
    path: str | Path, on_bad_row: str = "error", max_chars: int = DEFAULT_MAX_DOC_CHARS, columns: str = ""
) -> Iterator[Doc]:
    """Every valid document of a corpus, streamed; duplicates and bad rows raise or are skipped by policy."""
    if on_bad_row not in BAD_ROW_POLICIES:
        raise ValueError(f"on_bad_row must be one of {BAD_ROW_POLICIES}, got {on_bad_row!r}")
    seen: dict[str, tuple[str, int]] = {}
    for src in list_sources(path):
        for item in iter_rows(src, max_chars=max_chars, columns=columns):
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
    for item in iter_rows(location(spec.source), spec.start, spec.stop, spec.byte_offset, max_chars, spec.columns):
        if item.row in skip:
            continue
        if isinstance(item, BadRow):  # the file changed since the scan: refuse loudly
            raise CorpusError(f"{item.source}: row {item.row}: {item.reason} (corpus changed since the scan?)")
        yield item
