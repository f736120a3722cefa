"""Parquet checkpoint store: one row per document, written in small parts, each appearing atomically.

A shard is flushed in parts (every `flush_docs` documents, or once its oldest unwritten row is `flush_seconds` old)
so a kill loses at most a few seconds of work. A part is written to a temporary name and renamed, so a reader sees
a part whole or not at all. A shard's *done marker* (stats/shard-N.json, written last) records what it covers: every
part's name, rows, bytes, BLAKE2b digest and paid LLM calls, so a resume can check the parts instead of trusting
them (structuring/verify.py). While a shard runs, a *reply journal* (checkpoint/shard-N.replies.jsonl, one line
appended per paid document, removed when the shard is done) records what was paid for, so a resume can say how
many replies a kill made it buy again. A shard that left documents undone (transient failures) records them, with
how many runs in a row they failed and why, in checkpoint/shard-N.left-SEQ.json (a new object each run, the highest
SEQ counts), so that a document failing the same way run after run is given an `error` row instead of forever.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import get_type_hints

from rise_batch.io import read_json, write_json_atomic, write_parquet_atomic, write_text_atomic
from rise_batch.safe_read import open_regular, read_parquet
from rise_batch.storage import AnyPath, ObjectPath, location, open_binary, staging_path
from rise_batch.types import DocResult

_PART = re.compile(r"shard-(\d+)\.part-(\d+)\.parquet$")
_LEFT = re.compile(r"shard-(\d+)\.left-(\d+)\.json$")
REPAIR = (
    "re-run the same `rise-batch structure` command: it moves damaged files to OUT/damaged/ and redoes their "
    "documents (`--verify` also checks every part's digest)"
)


class CheckpointError(ValueError):
    """A checkpoint file that cannot be trusted. A ValueError, so every command exits 2 with the one-line message,
    which names the file and says what to run."""


def file_digest(path: AnyPath) -> str:
    """BLAKE2b of a file's (or object's) bytes: what `--verify` compares with the done marker's record."""
    h = hashlib.blake2b(digest_size=16)
    with open_binary(path) as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def paid_calls(row: DocResult) -> int:
    """LLM replies paid for this row (the same count as the stats' llm_calls)."""
    return row.attempts if row.tier == "llm" else 0


def _schema():  # lazy: pyarrow is an I/O-edge dependency, not needed to import this module
    import pyarrow as pa

    arrow = {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}
    hints = get_type_hints(DocResult)
    return pa.schema([(name, arrow[hints[name]]) for name in DocResult._fields])


class CheckpointStore:
    """The checkpoint/ and stats/ directories of one run, on a POSIX file system or in object storage (parts and
    markers are written once under their final names there; only the reply journal, appended to line by line, stays
    on this machine's disk: see `journal_path`)."""

    def __init__(self, out_dir: str | AnyPath) -> None:
        self.root = location(out_dir)
        self.parts_dir = self.root / "checkpoint"
        self.stats_dir = self.root / "stats"

    def ensure(self) -> None:
        self.parts_dir.mkdir(parents=True, exist_ok=True)
        self.stats_dir.mkdir(parents=True, exist_ok=True)

    def parts(self, shard_id: int | None = None) -> list[AnyPath]:
        if not self.parts_dir.exists():
            return []
        pat = f"shard-{shard_id:06d}.part-*.parquet" if shard_id is not None else "shard-*.part-*.parquet"
        return sorted(self.parts_dir.glob(pat))

    def parts_by_shard(self) -> dict[int, list[AnyPath]]:
        """shard id -> `parts(shard_id)` for every shard with parts, from one listing: a check of every shard
        would otherwise list the whole directory once per shard (in object storage, a LIST of every part of every
        shard per shard: quadratic in the shards)."""
        out: dict[int, list[AnyPath]] = {}
        for p in self.parts():
            head = p.name.split(".part-", 1)[0]  # what `parts(sid)`'s pattern fixes: "shard-{sid:06d}"
            sid = head[len("shard-") :]
            if sid.isascii() and sid.isdigit() and head == f"shard-{int(sid):06d}":
                out.setdefault(int(sid), []).append(p)
        return out

    def write_part(self, shard_id: int, rows: Iterable[DocResult]) -> AnyPath | None:
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

    def read_part(self, path: AnyPath, columns: list[str] | None = None):
        """One part as a pyarrow Table; an unreadable part is a CheckpointError naming it and the remedy."""
        try:
            return read_parquet(path, columns=columns)
        except (OSError, ValueError) as e:  # pyarrow: ArrowInvalid is a ValueError, ArrowIOError an OSError
            raise CheckpointError(f"{path}: damaged checkpoint part ({str(e).splitlines()[0]}); {REPAIR}") from e

    def read_parts(self, shard_id: int | None = None) -> list[tuple[AnyPath, list[DocResult]]]:
        return [(p, [DocResult(**rec) for rec in self.read_part(p).to_pylist()]) for p in self.parts(shard_id)]

    def read_rows(self, shard_id: int | None = None) -> list[DocResult]:
        return [row for _, rows in self.read_parts(shard_id) for row in rows]

    def done_docids(self, shard_id: int) -> set[str]:
        done: set[str] = set()
        for p in self.parts(shard_id):
            done.update(self.read_part(p, ["docid"]).column("docid").to_pylist())
        return done

    def stats_path(self, shard_id: int) -> AnyPath:
        return self.stats_dir / f"shard-{shard_id:06d}.json"

    def is_done(self, shard_id: int) -> bool:
        return self.stats_path(shard_id).exists()

    def mark_done(
        self,
        shard_id: int,
        stats: dict,
        parts: list[tuple[AnyPath, list[DocResult]]] | None = None,
        archive: dict | None = None,
    ) -> None:
        """The done marker: the shard's stats (ShardStats.marker_json) plus, under "parts", what they cover (read
        back by verify.py; ShardStats.from_marker leaves it out) and, under "archive", the shard's archive of
        files in object storage (structuring/archive.py). Then the shard's reply journal goes."""
        if parts is not None:
            stats = stats | {"parts": [part_record(p, rows) for p, rows in parts]}
        if archive is not None:
            stats = stats | {"archive": archive}
        write_json_atomic(self.stats_path(shard_id), stats, indent=None, sort_keys=True, ensure_ascii=True)
        self.journal_path(shard_id).unlink(missing_ok=True)

    def shard_stats(self, shard_id: int) -> dict:
        path = self.stats_path(shard_id)
        try:
            stats = read_json(path)
        except (OSError, ValueError) as e:
            raise CheckpointError(f"{path}: damaged done marker ({e}); {REPAIR}") from e
        if not isinstance(stats, dict):
            raise CheckpointError(f"{path}: damaged done marker (not a JSON object); {REPAIR}")
        return stats

    # -- documents left undone: their transient failures, run after run -----------------------------------------
    def _left_files(self, shard_id: int) -> list[tuple[int, AnyPath]]:
        if not self.parts_dir.exists():
            return []
        found = ((_LEFT.search(p.name), p) for p in self.parts_dir.glob(f"shard-{shard_id:06d}.left-*.json"))
        return sorted((int(m.group(2)), p) for m, p in found if m)

    def read_left(self, shard_id: int) -> dict[str, dict]:
        """docid -> {"runs": failed runs in a row, "errors": their messages} of the shard's last unfinished run; a
        damaged record counts as none (it only shortens how long a document is tried)."""
        files = self._left_files(shard_id)
        if not files:
            return {}
        try:
            record = read_json(files[-1][1])
        except (OSError, ValueError):
            return {}
        return {k: v for k, v in record.items() if isinstance(v, dict)} if isinstance(record, dict) else {}

    def write_left(self, shard_id: int, left: dict[str, dict]) -> None:
        """A new record under the next sequence number (objects are written once)."""
        seq = max((n for n, _ in self._left_files(shard_id)), default=-1) + 1
        path = self.parts_dir / f"shard-{shard_id:06d}.left-{seq:05d}.json"
        write_json_atomic(path, left, indent=None, sort_keys=True, ensure_ascii=True)

    # -- the reply journal: what a kill could lose ---------------------------------------------------------------
    def journal_path(self, shard_id: int) -> Path:
        """Beside the parts on a POSIX OUT. Object storage cannot be appended to: there the journal is on this
        machine's disk (under the temp dir, keyed by OUT), so a resume on the same machine still counts the replies
        a kill made it buy again; a resume elsewhere counts only what the parts and markers record."""
        if isinstance(self.root, ObjectPath):
            return staging_path(self.parts_dir / f"shard-{shard_id:06d}.replies.jsonl")
        return self.parts_dir / f"shard-{shard_id:06d}.replies.jsonl"

    def open_journal(self, shard_id: int) -> int:
        """An O_APPEND descriptor: each line reaches the file (the page cache) with one write, so a SIGKILL right
        after it keeps it; a line cut by a crash mid-write is skipped when read."""
        return os.open(self.journal_path(shard_id), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    @staticmethod
    def journal_append(fd: int, row: DocResult) -> None:
        if paid_calls(row):
            line = {"docid": row.docid, "llm_calls": paid_calls(row), "cost_usd": row.cost_usd}
            os.write(fd, (json.dumps(line, ensure_ascii=True) + "\n").encode("ascii"))

    def read_journal(self, shard_id: int) -> dict[str, dict]:
        """docid -> its last journal line ({} without a journal)."""
        path = self.journal_path(shard_id)
        if not path.exists():
            return {}
        out: dict[str, dict] = {}
        with open_regular(path, below=path.parent) as fh:  # safe_read: a FIFO or a link there is refused, not read
            lines = fh.read().splitlines()
        for line in lines:
            try:
                rec = json.loads(line)
                out[rec["docid"]] = rec
            except (ValueError, KeyError, TypeError):
                continue  # a line cut by a kill mid-write
        return out

    def rewrite_journal(self, shard_id: int, keep: dict[str, dict]) -> None:
        text = "".join(json.dumps(rec, ensure_ascii=True) + "\n" for rec in keep.values())
        write_text_atomic(self.journal_path(shard_id), text)

    def clean_temporaries(self) -> int:
        """Leftovers of a kill between write and rename: never valid, always safe to delete. Also under corpus/,
        where a stopped worker's `.<name>.txt.<pid>.<random>.tmp` would otherwise stay beside the documents
        (relpaths all end in .txt); one pass over the tree, about a second for 1M files. Object storage has none:
        nothing there is written under a temporary name."""
        if isinstance(self.root, ObjectPath):
            return 0
        n = 0
        for d in (self.parts_dir, self.stats_dir):
            for p in d.glob("*.tmp") if d.exists() else ():
                p.unlink(missing_ok=True)
                n += 1
        for root, _, files in os.walk(self.root / "corpus"):
            for name in files:
                if name.startswith(".") and name.endswith(".tmp"):
                    os.unlink(os.path.join(root, name))
                    n += 1
        return n


def part_record(path: AnyPath, rows: list[DocResult]) -> dict:
    """What a done marker records about one part: enough to check it cheaply (bytes, rows from the footer) or fully
    (digest), and to say what redoing it would cost (paid replies and dollars)."""
    return {
        "file": path.name,
        "rows": len(rows),
        "bytes": path.stat().st_size,
        "blake2b": file_digest(path),
        "llm_calls": sum(paid_calls(r) for r in rows),
        "cost_usd": sum(r.cost_usd for r in rows),
    }
