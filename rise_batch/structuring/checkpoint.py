"""Parquet checkpoint store: one row per document, written in small parts, each appearing atomically.

A shard is flushed in parts (every few hundred documents or seconds) so a kill loses at most one part's worth
of work, never a paid-for reply that was already written. A part is written to a temporary name and renamed, so a
reader sees a part whole or not at all. A shard is *done* only when its stats file exists, which is written last.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import get_type_hints

from rise_batch.io import read_json, write_json_atomic, write_parquet_atomic
from rise_batch.types import DocResult

_PART = re.compile(r"shard-(\d+)\.part-(\d+)\.parquet$")


def _schema():  # lazy: pyarrow is an I/O-edge dependency, not needed to import this module
    import pyarrow as pa

    arrow = {str: pa.string(), int: pa.int64(), float: pa.float64()}
    hints = get_type_hints(DocResult)
    return pa.schema([(name, arrow[hints[name]]) for name in DocResult._fields])


class CheckpointStore:
    """The checkpoint/ and stats/ directories of one run."""

    def __init__(self, out_dir: str | Path) -> None:
        self.root = Path(out_dir)
        self.parts_dir = self.root / "checkpoint"
        self.stats_dir = self.root / "stats"

    def ensure(self) -> None:
        self.parts_dir.mkdir(parents=True, exist_ok=True)
        self.stats_dir.mkdir(parents=True, exist_ok=True)

    def parts(self, shard_id: int | None = None) -> list[Path]:
        if not self.parts_dir.exists():
            return []
        pat = f"shard-{shard_id:06d}.part-*.parquet" if shard_id is not None else "shard-*.part-*.parquet"
        return sorted(self.parts_dir.glob(pat))

    def write_part(self, shard_id: int, rows: Iterable[DocResult]) -> Path | None:
        import pyarrow as pa

        rows = list(rows)
        if not rows:
            return None
        existing = [int(_PART.search(p.name).group(2)) for p in self.parts(shard_id)]
        seq = max(existing, default=-1) + 1
        path = self.parts_dir / f"shard-{shard_id:06d}.part-{seq:05d}.parquet"
        cols = {name: [getattr(r, name) for r in rows] for name in DocResult._fields}
        write_parquet_atomic(path, pa.table(cols, schema=_schema()))
        return path

    def read_rows(self, shard_id: int | None = None) -> list[DocResult]:
        import pyarrow.parquet as pq

        out: list[DocResult] = []
        for p in self.parts(shard_id):
            for rec in pq.read_table(p).to_pylist():
                out.append(DocResult(**rec))
        return out

    def done_docids(self, shard_id: int) -> set[str]:
        import pyarrow.parquet as pq

        done: set[str] = set()
        for p in self.parts(shard_id):
            done.update(pq.read_table(p, columns=["docid"]).column("docid").to_pylist())
        return done

    def stats_path(self, shard_id: int) -> Path:
        return self.stats_dir / f"shard-{shard_id:06d}.json"

    def is_done(self, shard_id: int) -> bool:
        return self.stats_path(shard_id).exists()

    def mark_done(self, shard_id: int, stats: dict) -> None:
        write_json_atomic(self.stats_path(shard_id), stats, indent=None, sort_keys=True, ensure_ascii=True)

    def shard_stats(self, shard_id: int) -> dict:
        return read_json(self.stats_path(shard_id))

    def clean_temporaries(self) -> int:
        """Leftovers of a kill between write and rename: never valid, always safe to delete."""
        n = 0
        for d in (self.parts_dir, self.stats_dir):
            for p in d.glob("*.tmp") if d.exists() else ():
                p.unlink(missing_ok=True)
                n += 1
        return n
