"""A checkpoint is verified, not trusted: what resume, `--verify` and `materialize` check before using it.

A shard is done when its marker (stats/shard-N.json) holds and every part it records is there as recorded. Resume
checks cheaply, from metadata only: the marker parses, each recorded part exists with its recorded size and its
Parquet footer gives the recorded row count, no unrecorded part sits beside them, and a shard's rows add up to its
documents in docmap.parquet (which also covers markers written before parts were recorded). `--verify` adds the
full check: every part's BLAKE2b digest against the marker, every part read whole, and the docids of each shard
equal to the docmap's, each once. Parts of unfinished shards have no record yet: their footers are checked (and,
with `--verify`, their rows read).

The driver checks again once the shards ran, before it reports success (`verify_outputs`): on its own view of OUT,
every shard has its marker, the parts of the shards this run finished match their recorded digests, and every
document of docmap.parquet has its structured file (`missing_structured`, also checked on resume). A worker that
wrote somewhere else (a node-local disk) is caught there instead of a run that exits 0 with files missing.

What fails is moved aside under OUT/damaged/ (kept, never deleted: it may be evidence) and the shard loses its done
marker, so the run redoes exactly the documents that are gone. How many paid replies that re-buys comes from the
marker's per-part record; for unfinished shards, and for replies a kill lost before they were written, from the
reply journal (checkpoint.py). Nothing is counted that was not recorded: a part of an old marker without records is
reported as re-buying an unknown number of replies.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

from rise_batch.corpus.readers import ShardSpec
from rise_batch.safe_read import read_parquet
from rise_batch.storage import AnyPath, ObjectPath, arrow_source, location, move
from rise_batch.structuring.checkpoint import REPAIR, CheckpointError, CheckpointStore, file_digest
from rise_batch.types import DocResult

DAMAGED = "damaged"
_THREADS = 8  # shards checked at once in object storage, which answers each request slowly, not each byte


class Damage(NamedTuple):
    path: AnyPath
    shard_id: int
    reason: str
    docs: int | None = None  # documents it held, as recorded (None: unknown)
    llm_calls: int | None = 0  # paid replies redoing them re-buys, as recorded (None: not recorded)
    cost_usd: float = 0.0


class Verification(NamedTuple):
    damaged: list[Damage]
    lost: dict[int, dict[str, dict]]  # shard -> journal lines of paid replies no readable part holds
    kept: dict[int, dict[str, dict]]  # shard -> journal lines of checkpointed documents (the journal to keep)

    @property
    def rebought_replies(self) -> int:
        recorded = sum(d.llm_calls or 0 for d in self.damaged)
        return recorded + sum(r["llm_calls"] for lines in self.lost.values() for r in lines.values())

    @property
    def rebought_cost_usd(self) -> float:
        recorded = sum(d.cost_usd for d in self.damaged)
        return recorded + sum(r.get("cost_usd", 0.0) for lines in self.lost.values() for r in lines.values())

    def stats(self) -> dict:
        """Keys for stats.json: present only when something was damaged or re-bought, so the stats of an
        undamaged, uninterrupted run keep their bytes."""
        if not self.damaged and not self.rebought_replies:
            return {}
        unknown = sum(d.llm_calls is None for d in self.damaged)
        return {
            "damaged_files": sorted(f"{d.path.parent.name}/{d.path.name}" for d in self.damaged),
            "rebought_replies": self.rebought_replies,
            "rebought_cost_usd": round(self.rebought_cost_usd, 6),
        } | ({"rebought_unrecorded_files": unknown} if unknown else {})


def docmap_shards(out: AnyPath, with_docids: bool) -> tuple[Counter[int], dict[int, list[str]]]:
    """Documents per shard from docmap.parquet (and, for --verify, their docids)."""

    table = read_parquet(out / "docmap.parquet", columns=["docid", "shard"] if with_docids else ["shard"])
    shards = table.column("shard").to_pylist()
    docids: dict[int, list[str]] = {}
    if with_docids:
        for d, s in zip(table.column("docid").to_pylist(), shards, strict=True):
            docids.setdefault(s, []).append(d)
    return Counter(shards), docids


def _part_problem(
    store: CheckpointStore, path: AnyPath, rec: dict | None, full: bool, digests: bool = False
) -> tuple[str | None, int]:
    """(why the part cannot be trusted or None, its footer's row count); `digests` checks the recorded digest
    without reading the rows (`full` does both)."""
    import pyarrow.parquet as pq

    where, fs = arrow_source(path)
    try:
        rows = pq.read_metadata(where, filesystem=fs).num_rows
    except (OSError, ValueError) as e:
        return f"unreadable Parquet footer ({str(e).splitlines()[0][:120]})", 0
    if rec is not None:
        size = path.stat().st_size
        if size != rec.get("bytes"):
            return f"{size} bytes, the done marker recorded {rec.get('bytes')}", rows
        if rows != rec.get("rows"):
            return f"{rows} rows, the done marker recorded {rec.get('rows')}", rows
    if (full or digests) and rec is not None and file_digest(path) != rec.get("blake2b"):
        return "its digest differs from the done marker's", rows
    if full:
        try:
            table = store.read_part(path)
        except CheckpointError as e:
            return f"unreadable rows ({str(e.__cause__).splitlines()[0][:120]})", rows
        names = table.column_names  # a part of an older version lacks the fields added since (at the end)
        if len(names) < len(DocResult._fields) - 1 or names != list(DocResult._fields)[: len(names)]:
            return f"columns {table.column_names} are not a checkpoint's", rows
    return None, rows


def _marker_records(store: CheckpointStore, sid: int) -> tuple[dict | None, dict[str, dict] | None, str | None]:
    """(marker, its part records by file name or None when it has none, why it is damaged or None)."""
    if not store.is_done(sid):
        return None, None, None
    try:
        marker = store.shard_stats(sid)
        parts = marker.get("parts")
        if parts is None:
            return marker, None, None
        return marker, {r["file"]: r for r in parts}, None
    except CheckpointError as e:
        return None, None, str(e.__cause__ or "not a JSON object")
    except (TypeError, KeyError, AttributeError):
        return None, None, "its part records are malformed"


def check_shard(
    store: CheckpointStore,
    sid: int,
    expected: int,
    docids: list[str] | None,
    full: bool,
    digests: bool = False,
    parts: list[AnyPath] | None = None,
) -> list[Damage]:
    """Every damaged file of one shard (parts and marker); an empty list when the shard can be trusted. `parts`:
    the shard's parts as `store.parts(sid)` lists them (`CheckpointStore.parts_by_shard`), else listed here."""
    marker, records, marker_problem = _marker_records(store, sid)
    damaged: list[Damage] = []
    if marker_problem is not None:
        damaged.append(Damage(store.stats_path(sid), sid, f"damaged done marker ({marker_problem})"))
    on_disk = {p.name: p for p in (store.parts(sid) if parts is None else parts)}
    for name, rec in (records or {}).items():
        if name not in on_disk:
            why = "missing: the done marker records it"
            damaged.append(Damage(store.parts_dir / name, sid, why, rec.get("rows"), rec.get("llm_calls"),
                                  rec.get("cost_usd", 0.0)))  # fmt: skip
    rows_ok = 0
    for name, path in on_disk.items():
        rec = (records or {}).get(name)
        problem, rows = _part_problem(store, path, rec, full, digests)
        if problem is None and records is not None and rec is None:
            problem = "not recorded in the done marker"
        if problem is None:
            rows_ok += rows
            continue
        if rec is not None:
            damaged.append(Damage(path, sid, problem, rec.get("rows"), rec.get("llm_calls"), rec.get("cost_usd", 0.0)))
        else:  # unfinished shard (the journal counts its replies) or an old marker (nothing recorded)
            damaged.append(Damage(path, sid, problem, None, None if marker is not None else 0))
    if marker is not None and not damaged and rows_ok != expected:
        why = f"its parts hold {rows_ok} rows, the shard has {expected} documents"
        damaged.append(Damage(store.stats_path(sid), sid, f"done marker does not cover the shard ({why})", None, None))
    if full and docids is not None and not damaged:
        seen = Counter(d for p in on_disk.values() for d in store.read_part(p, ["docid"]).column("docid").to_pylist())
        extra = [d for d, n in seen.items() if n > 1] + sorted(set(seen) - set(docids))
        if extra:
            why = f"docids not in this shard of docmap.parquet or checkpointed twice: {extra[:3]!r}"
            damaged.extend(Damage(p, sid, why, None, None) for p in on_disk.values())
    return damaged


def _unrecorded_part(store: CheckpointStore, d: Damage) -> bool:
    return d.docs is None and d.llm_calls == 0 and d.path.parent == store.parts_dir


def _each_shard(store: CheckpointStore, sids: list[int], check: Callable[[int], list[Damage]]) -> list[list[Damage]]:
    """`check(sid)` of every shard, in order: in object storage `_THREADS` shards at a time (each asks for its
    marker, its parts' footers and sizes: requests that wait on the server, one after another within a shard)."""
    if not isinstance(store.root, ObjectPath) or len(sids) < 2:
        return [check(sid) for sid in sids]
    with ThreadPoolExecutor(min(_THREADS, len(sids)), thread_name_prefix="verify") as pool:
        return list(pool.map(check, sids))


def verify_checkpoint(out: str | AnyPath, shards: Iterable[ShardSpec], full: bool = False) -> Verification:
    """Check every shard of a run (read-only); `full` is `--verify`."""
    out = location(out)
    store = CheckpointStore(out)
    counts, docids = docmap_shards(out, full)
    damaged: list[Damage] = []
    lost: dict[int, dict[str, dict]] = {}
    kept: dict[int, dict[str, dict]] = {}
    sids = [spec.shard_id for spec in shards]
    parts = store.parts_by_shard()

    def check(sid: int) -> list[Damage]:
        expected, ids = counts.get(sid, 0), docids.get(sid, []) if full else None
        return check_shard(store, sid, expected, ids, full, parts=parts.get(sid, []))

    for sid, bad in zip(sids, _each_shard(store, sids, check), strict=True):
        if not store.journal_path(sid).exists():  # a run before journals: an unfinished part's replies are unknown
            bad = [d._replace(llm_calls=None) if _unrecorded_part(store, d) else d for d in bad]
        damaged.extend(bad)
        journal = store.read_journal(sid)
        if journal:
            gone = {d.path for d in bad}
            have: set[str] = set()
            for p in parts.get(sid, []):
                if p not in gone:
                    have.update(store.read_part(p, ["docid"]).column("docid").to_pylist())
            kept[sid] = {d: r for d, r in journal.items() if d in have}
            lost[sid] = {d: r for d, r in journal.items() if d not in have}
    return Verification(damaged, lost, kept)


def missing_structured(out: str | AnyPath, shards: Iterable[ShardSpec]) -> list[Damage]:
    """One Damage per shard marked done whose structured files are not all under OUT/corpus (one file per docmap
    row of the shard). Its checkpoint holds every row, so repairing it re-writes the files and re-buys nothing.
    The tree is listed once (a directory walk, not a stat per document)."""

    out = location(out)
    if isinstance(out, ObjectPath):  # no file per document in object storage: the checkpoint is the corpus
        return []
    store = CheckpointStore(out)
    done = {s.shard_id for s in shards if store.is_done(s.shard_id)}
    if not done:
        return []
    corpus = out / "corpus"
    present: set[str] = set()
    for d, _, files in os.walk(corpus):
        prefix = d[len(str(corpus)) + 1 :]
        present.update(f"{prefix}/{f}" if prefix else f for f in files)
    table = read_parquet(out / "docmap.parquet", columns=["relpath", "shard"])
    missing: dict[int, list[str]] = {}
    totals: Counter[int] = Counter()
    for rel, sid in zip(table.column("relpath").to_pylist(), table.column("shard").to_pylist(), strict=True):
        if sid in done:
            totals[sid] += 1
            if rel not in present:
                missing.setdefault(sid, []).append(rel)
    return [
        Damage(corpus / rels[0], sid, f"missing: {len(rels)} of the shard's {totals[sid]} structured files", None, 0)
        for sid, rels in sorted(missing.items())
    ]


def verify_outputs(out: str | AnyPath, shards: Iterable[ShardSpec], fresh: set[int]) -> list[Damage]:
    """What the driver checks once the shards ran, on its own view of OUT, before it reports success: every shard
    has its done marker, every part it records is there as recorded (size, rows; and the digest for the `fresh`
    shards, those finished by this run: an earlier run's parts get resume's cheap check, `--verify` reads them
    all), its rows add up to its documents in docmap.parquet, and each of those documents has its structured file."""
    out = location(out)
    shards = list(shards)
    store = CheckpointStore(out)
    counts, _ = docmap_shards(out, False)
    parts = store.parts_by_shard()

    def check(sid: int) -> list[Damage]:
        if not store.is_done(sid):
            return [Damage(store.stats_path(sid), sid, "missing: its worker reported the shard done", None, 0)]
        return check_shard(store, sid, counts.get(sid, 0), None, False, sid in fresh, parts.get(sid, []))

    damaged = [d for bad in _each_shard(store, [s.shard_id for s in shards], check) for d in bad]
    return damaged + missing_structured(out, shards)


def _aside(out: AnyPath, path: AnyPath) -> AnyPath:
    """Move `path` under OUT/damaged/ (same relative path; a numbered suffix when that name was used before); in
    object storage a copy under the new name, then the old one deleted."""
    dest = out / DAMAGED / path.relative_to(out)
    n = 0
    while dest.exists():
        n += 1
        dest = dest.with_name(f"{path.name}.{n}")
    move(path, dest)
    return dest


def repair(out: str | AnyPath, v: Verification, say) -> None:
    """Move damaged files aside and unmark their shards, so the run redoes exactly what is gone; keep each journal
    to the documents that are checkpointed (the lost ones are redone and journalled again)."""
    out = location(out)
    store = CheckpointStore(out)
    for d in v.damaged:
        where = f"moved to {_aside(out, d.path)}" if d.path.exists() else "gone"
        redo = "its documents are redone" if d.docs is None else f"its {d.docs} documents are redone"
        bought = "an unrecorded number of" if d.llm_calls is None else str(d.llm_calls)
        if d.path.parent == store.parts_dir:
            then = f"{redo} (re-buys {bought} paid replies)"
        elif d.llm_calls is None:  # a marker that does not cover its shard: the missing documents are redone
            then = f"shard {d.shard_id} is finished again, its missing documents redone (re-buys {bought} paid replies)"
        else:
            then = f"shard {d.shard_id} is finished again from its parts (nothing re-bought)"
        say(f"{d.path}: {d.reason}; {where}; {then}")
    for sid in sorted({d.shard_id for d in v.damaged}):
        if store.is_done(sid):
            _aside(out, store.stats_path(sid))
    for sid, keep in v.kept.items():
        store.rewrite_journal(sid, keep)
    for sid, lines in v.lost.items():
        if lines:
            replies = sum(r["llm_calls"] for r in lines.values())
            say(f"shard {sid}: {len(lines)} documents whose {replies} paid replies were never checkpointed (an "
                "interrupted run) are redone")  # fmt: skip
        if sid not in v.kept:
            store.rewrite_journal(sid, {})


def require_intact(out: str | Path, shards: Iterable[ShardSpec]) -> None:
    """For commands that only read a checkpoint (materialize): refuse a damaged one, naming the file and the fix."""
    v = verify_checkpoint(out, shards)
    if v.damaged:
        d = v.damaged[0]
        more = f" (and {len(v.damaged) - 1} more damaged files)" if len(v.damaged) > 1 else ""
        raise CheckpointError(f"{d.path}: {d.reason}{more}; {REPAIR}")
