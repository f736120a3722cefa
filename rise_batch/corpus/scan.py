"""The up-front corpus pass: check every row, assign relpaths, cut shards, write docmap.parquet.

One sequential pass over the corpus is cheap next to structuring it, and it buys three things a 1M-document run
needs: bad input is found before money is spent; the docid -> relpath map is global and deterministic; shards are
plain row ranges, so a worker given a ShardSpec needs nothing else.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from rise_batch.corpus.docmap import RelpathAssigner, frontmatter_title
from rise_batch.corpus.readers import (
    BAD_ROW_POLICIES,
    DEFAULT_MAX_DOC_CHARS,
    CorpusError,
    ShardSpec,
    canonical_columns,
    iter_rows,
    list_sources,
    open_parquet,
    source_format,
)
from rise_batch.io import write_parquet_atomic
from rise_batch.storage import AnyPath, ObjectPath, open_binary
from rise_batch.types import BadRow


class CorpusPlan(NamedTuple):
    shards: list[ShardSpec]
    n_rows: int
    n_docs: int
    bad_rows: list[BadRow]
    fingerprint: str


def corpus_fingerprint(sources: list[AnyPath]) -> str:
    """Names, sizes and mtimes: enough to notice a corpus that changed under a resumed run, without reading it.
    An object's name is its URI without credentials (str of an ObjectPath)."""
    h = hashlib.sha256()
    for s in sources:
        st = s.stat()
        name = str(s) if isinstance(s, ObjectPath) else s.resolve()
        h.update(f"{name}\0{st.st_size}\0{int(st.st_mtime)}\n".encode())
    return h.hexdigest()[:16]


def _jsonl_offsets(src: AnyPath, rows: set[int]) -> dict[int, int]:
    """Byte offsets of the given row numbers in a plain JSONL file, so a shard can seek instead of re-reading."""
    out: dict[int, int] = {}
    pos = 0
    with open_binary(src) as fh:
        for row, raw in enumerate(fh):
            if row in rows:
                out[row] = pos
            pos += len(raw)
    return out


def scan_corpus(
    path: str | Path,
    shard_docs: int = 1000,
    on_bad_row: str = "error",
    limit: int | None = None,
    max_chars: int = DEFAULT_MAX_DOC_CHARS,
    on_doc: Callable[[str, str, int], None] | None = None,
    progress: Callable[[int], None] | None = None,
    columns: str = "",
) -> CorpusPlan:
    """Check every row and cut shards of at most `shard_docs` rows; `on_doc(docid, relpath, shard_id)` per doc.

    With `limit`, only the first `limit` valid documents belong to the plan (the last shard stops there).
    `columns` ("docid=id,text=contents") names the source columns; the shards carry it, so workers read alike.
    """
    if on_bad_row not in BAD_ROW_POLICIES:
        raise ValueError(f"on_bad_row must be one of {BAD_ROW_POLICIES}, got {on_bad_row!r}")
    if shard_docs < 1:
        raise ValueError("shard_docs must be >= 1")
    columns = canonical_columns(columns)
    sources = list_sources(path)
    _warn_huge_row_groups(sources, shard_docs)
    assigner = RelpathAssigner()
    seen: dict[str, tuple[str, int]] = {}
    bad: list[BadRow] = []
    shards: list[ShardSpec] = []
    n_rows = n_docs = 0
    for src in sources:
        cur_start, cur_skip, last_row = None, [], -1
        pending: list[tuple[int, int, list[int]]] = []  # (start, stop, skip_rows) of this file

        def close(stop: int, pending: list = pending) -> None:
            nonlocal cur_start, cur_skip
            if cur_start is not None:
                pending.append((cur_start, stop, cur_skip))
            cur_start, cur_skip = None, []

        for item in iter_rows(src, max_chars=max_chars, columns=columns):
            if limit is not None and n_docs >= limit:
                break
            n_rows += 1
            if cur_start is None:
                cur_start = item.row
            last_row = item.row
            if not isinstance(item, BadRow) and item.docid in seen:
                f, r = seen[item.docid]
                item = BadRow(item.docid, item.source, item.row, f"duplicate docid (first at {f} row {r})")
            if isinstance(item, BadRow):
                if on_bad_row == "error":
                    raise CorpusError(
                        f"{item.source}: row {item.row}: {item.reason} (use --on-bad-row skip to record and continue)"
                    )
                bad.append(item)
                cur_skip.append(item.row)
            else:
                seen[item.docid] = (item.source, item.row)
                rel = assigner.assign(item.docid, item.url, item.title or frontmatter_title(item.text))
                if on_doc is not None:
                    on_doc(item.docid, rel, len(shards) + len(pending))
                n_docs += 1
                if progress is not None:
                    progress(1)
            if item.row - cur_start + 1 >= shard_docs:
                close(item.row + 1)
        close(last_row + 1)
        offsets = _jsonl_offsets(src, {s for s, _, _ in pending}) if source_format(src).seekable_lines else {}
        for start, stop, skip in pending:
            shards.append(ShardSpec(len(shards), str(src), start, stop, offsets.get(start, 0), tuple(skip), columns))
        if limit is not None and n_docs >= limit:
            break
    if n_docs == 0:
        first = f"; the first: {bad[0].source} row {bad[0].row}: {bad[0].reason}" if bad else ""
        raise CorpusError(f"{path}: no valid documents ({n_rows} rows read, {len(bad)} refused{first})")
    return CorpusPlan(shards, n_rows, n_docs, bad, corpus_fingerprint(sources))


def _warn_huge_row_groups(sources: list[AnyPath], shard_docs: int) -> None:
    """Parquet cannot seek inside a row group: a shard starting deep inside a huge group decodes all rows before
    it. Say so up front (it is a property of the file, fixable by rewriting it) rather than be mysteriously slow."""
    import sys

    for src in sources:
        if not source_format(src).row_groups:
            continue
        meta = open_parquet(src).metadata
        biggest = max((meta.row_group(i).num_rows for i in range(meta.num_row_groups)), default=0)
        if biggest > 20 * shard_docs:
            print(
                f"rise-batch: warning: {src} has row groups of up to {biggest} rows; every shard of {shard_docs} "
                "rows re-decodes its group from the start. Rewrite it with smaller row groups (e.g. "
                "pyarrow.parquet.write_table(..., row_group_size=1000)) or raise --shard-docs.",
                file=sys.stderr,
            )


def shards_to_json(shards: list[ShardSpec]) -> list[dict]:
    return [s._asdict() | {"skip_rows": list(s.skip_rows)} for s in shards]


def shards_from_json(rows: list[dict]) -> list[ShardSpec]:
    return [ShardSpec(**(r | {"skip_rows": tuple(r.get("skip_rows", ()))})) for r in rows]


def write_bad_rows(bad: list[BadRow], path: Path) -> None:
    """Refused rows are outputs too: each with file, row and reason, so nothing is silently dropped."""
    import pyarrow as pa

    table = pa.table(
        {
            "docid": pa.array([b.docid for b in bad], pa.string()),
            "source": pa.array([b.source for b in bad], pa.string()),
            "row": pa.array([b.row for b in bad], pa.int64()),
            "reason": pa.array([b.reason for b in bad], pa.string()),
        }
    )
    write_parquet_atomic(path, table)
