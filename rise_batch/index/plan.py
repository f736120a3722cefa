"""Cut a corpus into index shards without reading its text, and read a shard under a bad-row policy.

`rise_batch.corpus.scan.scan_corpus` checks every row and assigns relpaths in one sequential pass: right for the
structure job, but for indexing alone it is a serial read of the whole corpus before any parallel work starts
(20 s for the 0.4 GB wiki2015, minutes at 1M documents). Here shards come from Parquet metadata (whole row groups,
so no worker decodes rows it then throws away) or from line offsets of plain JSONL; rows are checked by the
workers as they read, and duplicate docids are caught by the merge, which sees every docid in order.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from rise_batch.corpus.readers import (
    BAD_ROW_POLICIES,
    CorpusError,
    ShardSpec,
    canonical_columns,
    iter_rows,
    list_sources,
    open_parquet,
    source_format,
)
from rise_batch.storage import AnyPath, location, open_binary
from rise_batch.types import BadRow, Doc


def plan_index_shards(path: str | Path, shard_docs: int, columns: str = "") -> list[ShardSpec]:
    """Row ranges of about `shard_docs` rows: Parquet row groups (split only when larger than 2x), JSONL lines.

    Every shard carries `columns` ("docid=id,text=contents"), so the workers read the fields the user named."""
    if shard_docs < 1:
        raise ValueError("shard_docs must be >= 1")
    columns = canonical_columns(columns)
    shards: list[ShardSpec] = []
    for src in list_sources(path):
        fmt = source_format(src)
        if fmt.row_groups:
            ranges = _parquet_ranges(src, shard_docs)
        elif fmt.seekable_lines:
            ranges = _jsonl_ranges(src, shard_docs)
        else:  # cannot seek (gzip, or a format that says nothing): one shard per file
            ranges = [(0, None, 0)]
        for start, stop, offset in ranges:
            shards.append(ShardSpec(len(shards), str(src), start, stop, offset, columns=columns))
    return shards


def _parquet_ranges(src: AnyPath, shard_docs: int) -> list[tuple[int, int, int]]:
    meta = open_parquet(src).metadata
    out: list[tuple[int, int, int]] = []
    start = row = 0
    for g in range(meta.num_row_groups):
        n = meta.row_group(g).num_rows
        if n > 2 * shard_docs:  # a huge row group: split it, accepting that each piece decodes the group
            if row > start:
                out.append((start, row, 0))
            out += [(r, min(r + shard_docs, row + n), 0) for r in range(row, row + n, shard_docs)]
            start = row + n
        elif row + n - start >= shard_docs:
            out.append((start, row + n, 0))
            start = row + n
        row += n
    if row > start:
        out.append((start, row, 0))
    return out


def _jsonl_ranges(src: AnyPath, shard_docs: int) -> list[tuple[int, int, int]]:
    out: list[tuple[int, int, int]] = []
    pos = 0
    with open_binary(src) as fh:
        for row, raw in enumerate(fh):
            if row % shard_docs == 0:
                out.append((row, row + shard_docs, pos))
            pos += len(raw)
    return out


def read_shard_docs(spec: ShardSpec, on_bad_row: str, bad: list[BadRow]) -> Iterator[Doc]:
    """Valid documents of a shard; a bad row raises (policy "error") or is appended to `bad` ("skip")."""
    if on_bad_row not in BAD_ROW_POLICIES:
        raise ValueError(f"on_bad_row must be one of {BAD_ROW_POLICIES}, got {on_bad_row!r}")
    skip = set(spec.skip_rows)
    for item in iter_rows(location(spec.source), spec.start, spec.stop, spec.byte_offset, columns=spec.columns):
        if item.row in skip:
            continue
        if isinstance(item, BadRow):
            if on_bad_row == "error":
                raise CorpusError(f"{item.source}: row {item.row}: {item.reason} (use --on-bad-row skip to skip it)")
            bad.append(item)
            continue
        yield item


def later_copy(
    first: dict[str, tuple[int, int]], docid: str, shard: int, row: int, shards: list[ShardSpec], on_bad_row: str
) -> bool:
    """Whether (shard, row) repeats a docid seen earlier in corpus order (`first` remembers each docid's first
    place). Under "error" a repeat raises with both places named; under "skip" the caller leaves it out. The BM25
    and dense builds decide duplicates here alike, so both parts of a hybrid index hold the same rows."""
    seen = first.setdefault(docid, (shard, row))
    if seen == (shard, row):
        return False
    if on_bad_row == "error":
        raise CorpusError(
            f"{shards[shard].source}: row {row}: duplicate docid {docid!r} "
            f"(first at {shards[seen[0]].source} row {seen[1]}; use --on-bad-row skip to skip it)"
        )
    return True
