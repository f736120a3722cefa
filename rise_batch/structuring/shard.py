"""structure_shard(): one shard in, checkpoint parts + materialized files + shard stats out.

Online, this is the only function that structures documents: the in-process executor and the Ray actors both call
it with a ShardSpec and a backend, so whatever the tests prove about it holds on a cluster. Batch mode replays the
same backend over the provider's replies (structuring/batch.py). Both end every shard in `finish_shard`, whose order
of writes is the resume contract: parts (atomic) -> structured files (atomic) -> shard stats (the done marker, last).

What is not a document's outcome gets no row: a stop (`--max-cost`, a refused key) ends the shard unfinished with
its finished rows flushed; a transient failure (connection refused, a lost limiter, after every attempt) leaves its
document out and the shard unfinished (`docs_left` in the returned stats), so a resume does exactly those, until
it has failed so in `llm.max_transient_runs` runs in a row: then it gets an `error` row naming the failures (the
checkpoint's left record counts the runs), so a job whose endpoint fails one document for good can end. An
unfinished shard still reports the rows it holds, so stats.json agrees with the checkpoint. A shard
run again in the same job (its worker's node was lost) counts the replies its first run received but never wrote
(`rebought_replies`, from the reply journal), as a resume does.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from rise_batch.config import StructureConfig
from rise_batch.corpus.docmap import checked_columns
from rise_batch.corpus.readers import ShardSpec, read_shard
from rise_batch.io import write_text_atomic
from rise_batch.llm.errors import KeyRefused
from rise_batch.llm.retry import is_transient
from rise_batch.safe_read import read_parquet
from rise_batch.storage import AnyPath, ObjectPath, arrow_source, location
from rise_batch.structure.backends import error_result, render_result
from rise_batch.structuring.archive import write_archive
from rise_batch.structuring.budget import BudgetExceeded
from rise_batch.structuring.checkpoint import CheckpointStore
from rise_batch.structuring.stats import OnDoc, ShardStats
from rise_batch.types import Doc, DocResult

STOPS = (BudgetExceeded, KeyRefused)  # stop the job: no new documents, finished rows kept, the shard left unfinished
RETAIN_CHARS = 100_000_000  # rendered text kept per shard for materialize; past it, docs are re-read and re-rendered


def shard_relpaths(out_dir: AnyPath, shard_id: int, table=None) -> dict[str, str]:
    """This shard's slice of docmap.parquet (a worker never loads the whole 1M-row map), or of `table`, the slice
    `docmap_by_shard` already cut from it, checked safe."""
    path = out_dir / "docmap.parquet"
    if table is None:
        import pyarrow.dataset as ds

        where, fs = arrow_source(path)
        table = ds.dataset(where, filesystem=fs).to_table(
            columns=["docid", "relpath"], filter=ds.field("shard") == shard_id
        )
    # joined to OUT/corpus/ and written: one unsafe row would write outside the run (checked before any write)
    docids, rels = checked_columns(table, f"{path} (shard {shard_id})")
    return dict(zip(docids, rels, strict=True))


def docmap_by_shard(docs_dir: Path) -> dict:
    """shard id -> that shard's (docid, relpath) rows of docs_dir/docmap.parquet, read once: its one row group
    decoded per shard would cost a node ~0.2 s of CPU a shard at 1M documents (200 s for 1,000 shards)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    table = read_parquet(docs_dir / "docmap.parquet", columns=["docid", "relpath", "shard"])
    if table.num_rows == 0:
        return {}
    table = table.take(pc.sort_indices(table.column("shard"))).combine_chunks()
    shard = table.column("shard").to_numpy()
    cuts = np.flatnonzero(np.diff(shard)) + 1
    pairs = table.select(["docid", "relpath"])
    # each a compact copy (take), as a slice would carry the whole map when pickled to a process
    return {
        int(shard[lo]): pairs.slice(lo, hi - lo).take(pa.array(np.arange(hi - lo)))
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(shard)], strict=True)
    }


def _write_doc(path: Path, text: str, made: set[Path]) -> None:
    """One corpus/<relpath> file, atomically; `made` remembers directories already created (one mkdir each)."""
    if path.parent not in made:
        path.parent.mkdir(parents=True, exist_ok=True)
        made.add(path.parent)
    write_text_atomic(path, text)


CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
OPEN_DIRS = 64  # directory descriptors kept open while creating files (a corpus may have thousands of hosts)


def _create_in_place(dest: Path, docs: Iterable[tuple[str, str | bytes]]) -> int:
    """Each file created in place below `dest`, a staging tree this process made and that appears whole once
    finished (a node-local cache entry): no temporary and rename per file, which cost a third of a node's docs tree.
    O_EXCL | O_NOFOLLOW: never through a planted name, never twice. Created relative to its directory's descriptor
    (opened once per directory, no link followed), with os.write: a node writes a million of them."""
    dirs: dict[str, int] = {}
    n = 0
    try:
        for rel, text in docs:
            head, _, name = rel.rpartition("/")
            dfd = dirs.get(head)
            if dfd is None:
                if len(dirs) >= OPEN_DIRS:
                    for fd in dirs.values():
                        os.close(fd)
                    dirs.clear()
                where = dest / head
                where.mkdir(parents=True, exist_ok=True)
                dfd = dirs[head] = os.open(where, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            fd = os.open(name, CREATE, 0o666, dir_fd=dfd)
            try:
                view = memoryview(text if isinstance(text, bytes) else text.encode("utf-8"))
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            n += 1
    finally:
        for fd in dirs.values():
            os.close(fd)
    return n


def shard_texts(
    out_dir: AnyPath,
    spec: ShardSpec,
    max_chars: int,
    rows: list[DocResult] | None = None,
    rendered: dict[str, str] | None = None,
    rel: dict[str, str] | None = None,
) -> Iterator[tuple[str, str, str]]:
    """(docid, relpath, text) of every checkpointed doc of a shard: its structured text, or the original text. The
    one source of a shard's files, whether written as files (`materialize_shard`) or into its archive (archive.py).

    `rendered` holds texts the backend already rendered in this process; only docs missing from it (checkpointed
    by an earlier, interrupted run) cost a re-read of the shard and a re-render from their checkpoint row. `rel`:
    the shard's docid -> relpath, when the caller has it (`shard_relpaths`).
    """
    store = CheckpointStore(out_dir)
    by_id = {r.docid: r for r in (rows if rows is not None else store.read_rows(spec.shard_id))}
    rel = rel if rel is not None else shard_relpaths(out_dir, spec.shard_id)
    rendered = rendered or {}
    have = by_id.keys() & rendered.keys()
    for docid in have:
        yield docid, rel[docid], rendered[docid]
    if len(by_id) > len(have):
        for doc in read_shard(spec, max_chars):
            row = by_id.get(doc.docid)
            if row is None or doc.docid in rendered:
                continue
            yield doc.docid, rel[doc.docid], render_result(doc.text, row)


def materialize_shard(
    out_dir: AnyPath,
    spec: ShardSpec,
    max_chars: int,
    rows: list[DocResult] | None = None,
    rendered: dict[str, str] | None = None,
    dest: Path | None = None,
    fresh: bool = False,
    rel: dict[str, str] | None = None,
) -> int:
    """Write <dest>/<relpath> (default OUT/corpus/) for every checkpointed doc of a shard (`shard_texts`); returns
    how many. `fresh`: `dest` is a staging tree that appears whole once finished (see `_create_in_place`)."""
    return write_docs(
        dest if dest is not None else Path(out_dir) / "corpus",
        ((rel, text) for _, rel, text in shard_texts(out_dir, spec, max_chars, rows, rendered, rel)),
        fresh,
    )


def write_docs(dest: Path, docs: Iterable[tuple[str, str | bytes]], fresh: bool = False) -> int:
    """Each (relpath, text) written at dest/relpath (relpaths already checked safe, see `shard_relpaths`): atomically,
    or created in place when `dest` is a `fresh` staging tree (`_create_in_place`). Returns how many."""
    if fresh:
        return _create_in_place(dest, docs)
    made: set[Path] = set()
    n = 0
    for rel, text in docs:
        _write_doc(dest / rel, text, made)  # type: ignore[arg-type]  # str: shard_texts
        n += 1
    return n


async def structure_shard(
    cfg: StructureConfig,
    spec: ShardSpec,
    backend,
    run_hash: str,
    on_doc: OnDoc | None = None,
) -> ShardStats:
    """Structure every not-yet-checkpointed doc of one shard, then materialize it and mark it done; `on_doc(n, usd)`
    counts each document (and its cost) as it finishes, `on_doc(n, 0.0, True)` each one an earlier run did, for the
    driver's progress line."""
    out = location(cfg.out)
    store = CheckpointStore(out)
    if store.is_done(spec.shard_id):
        return ShardStats.from_marker(store.shard_stats(spec.shard_id), resumed=True)
    t0 = time.monotonic()
    done = store.done_docids(spec.shard_id)
    rebought = count_rebought(store, spec.shard_id, done)
    shard = ShardPass(cfg, spec, store, on_doc)
    await shard.run(backend, run_hash, done)
    if shard.left:  # not done: no marker, so a resume redoes exactly these documents
        store.write_left(spec.shard_id, shard.failing)
        rows = ShardStats.of_rows(store.read_rows(spec.shard_id))  # what the checkpoint holds, as stats.json says
        rows.docs_resumed = shard.skipped
        left = ShardStats(
            docs_left=sum(shard.left.values()), left_kinds=dict(shard.left), left_example=shard.left_example
        )
        return rows + rebought + left
    stats = await finish_shard(
        out, spec, cfg.max_doc_chars, shard.rendered, lambda: (shard.skipped, time.monotonic() - t0)
    )
    return stats + rebought  # this run's, not the marker's: a later resume does not count them again


class ShardPass:
    """One online pass over a shard: the buffer of finished rows, the policy that writes it as a checkpoint part, and
    the loop that keeps up to `concurrency` documents in flight.

    A part is written every `flush_docs` rows and at the latest `flush_seconds` after its oldest row arrived (a wait
    for replies wakes up for it), so replies that stall never hold finished rows in memory. Each finished row is
    journalled first (the reply is paid for), then buffered; its rendered text is kept for materialize up to
    RETAIN_CHARS per shard.
    """

    def __init__(
        self,
        cfg: StructureConfig,
        spec: ShardSpec,
        store: CheckpointStore,
        on_doc: OnDoc | None,
    ) -> None:
        self.cfg, self.spec, self.store, self.on_doc = cfg, spec, store, on_doc
        self.buffer: list[DocResult] = []
        self.oldest = 0.0  # when the oldest row of `buffer` arrived: a part is due flush_seconds after it
        self.rendered: dict[str, str] = {}  # written by materialize without re-reading or re-rendering the shard
        self.retained = 0
        self.skipped = 0  # documents an earlier run checkpointed
        self.left: Counter[str] = Counter()  # documents left for a resume, by the kind of their transient failure
        self.left_example = ""
        self.pending: set[asyncio.Task] = set()  # documents in flight
        self.docs: dict[asyncio.Task, Doc] = {}  # each in-flight task's document (for the row of one given up on)
        self.run_hash = ""
        self.history = store.read_left(spec.shard_id)  # documents earlier runs left, and how many runs in a row
        self.failing: dict[str, dict] = {}  # what this run leaves: the next run's history
        self.journal = -1  # the reply journal's descriptor, open while `run` runs

    def flush(self) -> None:
        self.store.write_part(self.spec.shard_id, self.buffer)
        self.buffer.clear()

    def flush_due_in(self) -> float | None:
        """Seconds until the buffer must be written (None: empty), so a wait for replies wakes up to write it."""
        return max(0.0, self.oldest + self.cfg.flush_seconds - time.monotonic()) if self.buffer else None

    def finished(self, result: tuple[DocResult, str]) -> None:
        res, text = result
        self.store.journal_append(self.journal, res)
        if not self.buffer:
            self.oldest = time.monotonic()
        self.buffer.append(res)
        if self.retained < RETAIN_CHARS:
            self.rendered[res.docid] = text
            self.retained += len(text)
        if self.on_doc is not None:
            self.on_doc(1, res.cost_usd)  # the driver's progress: documents and dollars as they come
        if len(self.buffer) >= self.cfg.flush_docs or self.flush_due_in() == 0.0:
            self.flush()

    async def wait(self, tasks: set[asyncio.Task]) -> tuple[set[asyncio.Task], set[asyncio.Task]]:
        """The next finished replies, or none once the buffer is due: replies that stall (a hung request, a rate
        limit) never hold finished rows in memory past flush_seconds."""
        complete, rest = await asyncio.wait(tasks, timeout=self.flush_due_in(), return_when=asyncio.FIRST_COMPLETED)
        if not complete and self.flush_due_in() == 0.0:
            self.flush()
        return complete, rest

    def take(self, tasks: Iterable[asyncio.Task]) -> None:
        """Buffer the finished documents, count the transient failures; a stop is raised after the others are kept."""
        stop = None
        for t in tasks:
            e = t.exception()
            if isinstance(e, STOPS):
                stop = e
            elif e is not None and is_transient(e):
                self.transient(self.docs.pop(t), e)
            else:
                self.docs.pop(t, None)
                self.finished(t.result())
        if stop is not None:
            raise stop

    def transient(self, doc: Doc, e: BaseException) -> None:
        """A document whose requests failed for a transient reason: left for a resume, or, once that has happened
        in `max_transient_runs` runs in a row, recorded as `error` naming each run's failure."""
        before = self.history.get(doc.docid, {})
        runs = int(before.get("runs", 0)) + 1 if isinstance(before.get("runs"), int) else 1
        errors = [*(x for x in before.get("errors", []) if isinstance(x, str)), str(e)[:200]][-runs:]
        if runs >= self.cfg.llm.max_transient_runs:
            said = "; ".join(f"run {i + 1}: {x}" for i, x in enumerate(errors))
            message = f"failed for a transient reason in {runs} runs in a row, given up ({said})"
            self.finished(error_result(doc, self.run_hash, "llm", message))
            return
        self.left[e.kind] += 1  # type: ignore[attr-defined]  # an LLMError
        self.left_example = self.left_example or str(e)[:300]
        self.failing[doc.docid] = {"runs": runs, "errors": errors}

    async def run(self, backend, run_hash: str, done: set[str]) -> None:
        """Every document of the shard not in `done`, then the last part; on a stop, the finished rows are kept."""
        self.journal = self.store.open_journal(self.spec.shard_id)
        self.run_hash = run_hash
        try:
            await self.submit_all(backend, run_hash, done)
            while self.pending:
                await self.take_next()
        except STOPS:  # --max-cost, a refused key: keep every finished row, leave the shard unfinished for a resume
            await self.keep_finished()
            self.flush()
            raise
        finally:
            os.close(self.journal)
        self.flush()

    async def submit_all(self, backend, run_hash: str, done: set[str]) -> None:
        """Read the shard and start its documents, waiting whenever `concurrency` of them are in flight."""
        concurrency = self.cfg.llm.concurrency if backend.name == "llm" else 1
        for doc in read_shard(self.spec, self.cfg.max_doc_chars):
            if doc.docid in done:
                self.skipped += 1
                if self.on_doc is not None:
                    self.on_doc(1, 0.0, True)  # done (and paid for) by an earlier run
                continue
            if backend.name != "llm":  # the heuristic: no waiting, rows in corpus order
                self.finished(await backend.structure(doc, run_hash))
                continue
            task = asyncio.create_task(backend.structure(doc, run_hash))
            self.pending.add(task)
            self.docs[task] = doc
            while len(self.pending) >= concurrency:
                await self.take_next()

    async def take_next(self) -> None:
        complete, self.pending = await self.wait(self.pending)
        self.take(complete)

    async def keep_finished(self) -> None:
        """After a stop: wait for the documents in flight and keep those that finished (they are paid for)."""
        if self.pending:
            await asyncio.wait(self.pending)
            for t in self.pending:
                e = t.exception()
                if not isinstance(e, STOPS) and not (e is not None and is_transient(e)):
                    self.finished(t.result())


def count_rebought(store: CheckpointStore, shard_id: int, done: set[str]) -> ShardStats:
    """Replies an earlier run of this shard received (journalled) but never checkpointed: this run buys them again.
    The journal keeps only checkpointed documents afterwards, so they are counted once. At the start of a job the
    verification has already done this (structuring/verify.py); here it catches a shard rerun within the job."""
    journal = store.read_journal(shard_id)
    lost = [r for d, r in journal.items() if d not in done]
    if not lost:
        return ShardStats()
    store.rewrite_journal(shard_id, {d: r for d, r in journal.items() if d in done})
    return ShardStats(
        rebought_replies=sum(r["llm_calls"] for r in lost),
        rebought_cost_usd=sum(r.get("cost_usd", 0.0) for r in lost),
    )


async def finish_shard(
    out: AnyPath,
    spec: ShardSpec,
    max_chars: int,
    rendered: dict[str, str] | None = None,
    online: Callable[[], tuple[int, float]] | None = None,
) -> ShardStats:
    """The end of every shard, online or batch: its files from the whole checkpoint, then the done marker, last.

    `online()` gives the online loop's figures for the marker once the files are written: (documents an earlier run
    had checkpointed, the shard's seconds). In
    object storage no corpus/ file is written (not a million small objects): the checkpoint is the structured
    corpus there, the shard's files are one archive object (structuring/archive.py) a node unpacks, and
    `rise-batch materialize` builds the file tree where it is used.
    """
    store = CheckpointStore(out)
    parts = store.read_parts(spec.shard_id)
    rows = [row for _, part in parts for row in part]
    archive = None
    # file writes block for ~1 ms each: off the event loop, so the requests of other shards keep flowing
    if not isinstance(store.root, ObjectPath):
        await asyncio.to_thread(materialize_shard, out, spec, max_chars, rows, rendered)
    else:  # the shard's files in one object, for the nodes that make the tree (structuring/archive.py)
        texts = shard_texts(out, spec, max_chars, rows, rendered)
        archive = await asyncio.to_thread(write_archive, out, spec.shard_id, texts)
    stats = ShardStats.of_rows(rows)
    if online is not None:
        stats.docs_resumed, stats.shard_seconds = online()
    # records every part (rows, bytes, digest) it covers, and the archive
    store.mark_done(spec.shard_id, stats.marker_json(), parts, archive)
    return stats
