"""The spend journal of an output directory: every paid request written down before it leaves, settled after.

Layout (under `OUT/spend/`):
- `<host>-<pid>-<random>.jsonl`: one append-only file per writing process (a worker, the driver, a structuring
  actor), so no two processes ever write one file and nothing needs a cross-process lock. Each line is a JSON
  object: a reservation `{"id", "sha256", "worst_usd", "what"}` written and flushed before the request is sent, or a
  settlement `{"id", "billed_usd", "usage", "usage_estimated"}` written when its reply (or failure) came.
- on object storage (`s3://` OUT) a process cannot append: each writer puts small objects
  `<host>-<pid>-<random>/<seq>.jsonl` (a PUT appears whole or not at all). A reservation is put before its request
  is sent, together with the settlements waiting since the last put (group commit: a settlement that is late only
  leaves its reservation counted at the worst case, never lower); the rest is put when the writer closes.
- `replies/<sha[:2]>/<sha>.json`: every reply that was paid for and used, keyed by the sha256 of its request
  (money/replies.py), written before the caller sees it.

What it is worth: `spent = settled amounts + unsettled reservations at their worst case`, summed over every writer
of every resume (`Spend.read`). A reservation is on the page cache before its request leaves, so `kill -9` of any
process loses nothing: its calls in flight are counted at their worst case. Losing a whole node (power, kernel
panic) loses what its kernel had not yet written back of the local file (Linux writes dirty pages back within about
30 s), unless OUT is on a shared or object store: there every reservation is stored before its request is sent.
"""

from __future__ import annotations

import atexit
import math
import os
import secrets
import socket
import threading
from collections.abc import Iterable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import orjson

from rise_batch.storage import AnyPath, ObjectPath, location

SPEND = "spend"  # the journal's folder in an output directory

# what a request is for ("trajectory:<query id>", "judgment:<query id>", "document:<docid>"): set by the code that
# runs one unit of work (an asyncio task copies it), written with each reservation, so spend can be told per unit
spend_what: ContextVar[str] = ContextVar("spend_what", default="")


def journal_dir(out: str | os.PathLike | AnyPath) -> AnyPath:
    """Where the journal of output directory `out` lives."""
    return location(out) / SPEND


class JournalWriter:
    """One process's side of a directory's journal (`writer_for` hands out one per process and directory)."""

    def __init__(self, directory: AnyPath) -> None:
        self.dir = directory
        self.name = f"{socket.gethostname()[:40]}-{os.getpid()}-{secrets.token_hex(4)}"
        self.lock = threading.Lock()
        self.n = 0
        self._pending: list[bytes] = []  # object storage: lines not yet put
        self._seq = 0
        self._file: Any = None

    def reserve(self, sha256: str, worst_usd: float, what: str) -> str:
        """Write down a request about to be sent, durable before this returns; its id, for `settle`."""
        with self.lock:
            self.n += 1
            rid = str(self.n)
            self._write({"id": rid, "sha256": sha256, "worst_usd": round(worst_usd, 10), "what": what}, durable=True)
            return rid

    def settle(self, rid: str, billed_usd: float, usage: dict[str, int] | None, estimated: bool) -> None:
        """The request's reply (or failure) came: what it was billed, the tokens it was billed for, and whether
        those are the engine's own count (the reply's usage missing or not believable)."""
        line = {"id": rid, "billed_usd": round(billed_usd, 10), "usage": usage, "usage_estimated": estimated}
        with self.lock:
            self._write(line, durable=not isinstance(self.dir, ObjectPath))

    def _write(self, record: dict[str, Any], durable: bool) -> None:
        data = orjson.dumps(record) + b"\n"
        if isinstance(self.dir, ObjectPath):
            self._pending.append(data)
            if durable:
                self._put()
            return
        if self._file is None:
            self.dir.mkdir(parents=True, exist_ok=True)
            self._file = open(self.dir / f"{self.name}.jsonl", "ab", buffering=1 << 16)  # noqa: SIM115 (lives long)
        self._file.write(data)
        self._file.flush()  # on the page cache: a process kill cannot lose it

    def _put(self) -> None:
        if not self._pending:
            return
        self._seq += 1
        (self.dir / self.name / f"{self._seq:09d}.jsonl").write_bytes(b"".join(self._pending))
        self._pending = []

    def flush(self) -> None:
        """Put the settlements still waiting (object storage; a local journal is flushed line by line)."""
        with self.lock:
            if isinstance(self.dir, ObjectPath):
                self._put()

    def close(self) -> None:
        with self.lock:
            if isinstance(self.dir, ObjectPath):
                self._put()
            elif self._file is not None:
                self._file.close()
                self._file = None


_WRITERS: dict[tuple[int, str], JournalWriter] = {}
_WRITERS_LOCK = threading.Lock()


def writer_for(out: str | os.PathLike | AnyPath) -> JournalWriter:
    """This process's writer of output directory `out`'s journal (one file per process and directory)."""
    directory = journal_dir(out)
    key = (os.getpid(), str(directory))
    with _WRITERS_LOCK:
        writer = _WRITERS.get(key)
        if writer is None:
            writer = _WRITERS[key] = JournalWriter(directory)
        return writer


@atexit.register
def _close_all() -> None:
    for writer in list(_WRITERS.values()):
        writer.close()


@dataclass
class Spend:
    """What a journal says: dollars settled, dollars still reserved (counted at their worst case), and the settled
    dollars of each `what` (a trajectory, a judgment, a document)."""

    settled_usd: float = 0.0
    unsettled_usd: float = 0.0
    calls: int = 0
    unsettled: int = 0
    usage_estimated: int = 0
    by_what: dict[str, float] = field(default_factory=dict)
    unsettled_by_what: dict[str, float] = field(default_factory=dict)  # worst cases of calls never settled

    @property
    def total_usd(self) -> float:
        return self.settled_usd + self.unsettled_usd

    def add(self, other: Spend) -> Spend:
        self.settled_usd += other.settled_usd
        self.unsettled_usd += other.unsettled_usd
        self.calls += other.calls
        self.unsettled += other.unsettled
        self.usage_estimated += other.usage_estimated
        for k, v in other.by_what.items():
            self.by_what[k] = self.by_what.get(k, 0.0) + v
        for k, v in other.unsettled_by_what.items():
            self.unsettled_by_what[k] = self.unsettled_by_what.get(k, 0.0) + v
        return self

    @classmethod
    def read(cls, out: str | os.PathLike | AnyPath) -> Spend:
        """The journal of output directory `out`, every writer merged (an empty Spend when there is none)."""
        directory = journal_dir(out)
        spend = cls()
        if isinstance(directory, ObjectPath):
            groups: dict[str, list[bytes]] = {}
            for obj, _ in directory.list(recursive=True):
                if obj.name.endswith(".jsonl") and obj.parent != directory:
                    groups.setdefault(str(obj.parent), []).append(obj.read_bytes())
            for parts in groups.values():
                spend.add(of_lines(b"".join(parts).splitlines()))
            return spend
        if not directory.is_dir():
            return spend
        for path in sorted(directory.glob("*.jsonl")):
            with open(path, "rb") as f:
                spend.add(of_lines(f))
        return spend


def of_lines(lines: Iterable[bytes]) -> Spend:
    """One writer's lines as a Spend. A line cut by a kill mid-write is skipped: a reservation whose settlement is
    cut stays at its worst case; one cut itself was never followed by its request (the write comes first). An
    amount that is not a finite number >= 0 counts as the reservation's worst case."""
    worst: dict[str, tuple[float, str]] = {}
    billed: dict[str, tuple[float, bool]] = {}
    for raw in lines:
        try:
            rec = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(rec, dict) or "id" not in rec:
            continue
        if "worst_usd" in rec:
            worst[str(rec["id"])] = (_amount(rec.get("worst_usd")), str(rec.get("what") or ""))
        elif "billed_usd" in rec:
            billed[str(rec["id"])] = (_amount(rec.get("billed_usd"), math.inf), bool(rec.get("usage_estimated")))
    spend = Spend()
    for rid, (w, what) in worst.items():
        paid, estimated = billed.get(rid, (None, False))
        spend.calls += 1
        if paid is None:
            spend.unsettled += 1
            spend.unsettled_usd += w
            if what:
                spend.unsettled_by_what[what] = spend.unsettled_by_what.get(what, 0.0) + w
            continue
        cost = w if math.isinf(paid) else paid
        spend.settled_usd += cost
        spend.usage_estimated += estimated
        if what:
            spend.by_what[what] = spend.by_what.get(what, 0.0) + cost
    return spend


def _amount(value: Any, bad: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return bad
    return float(value)
