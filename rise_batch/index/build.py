"""build_index(): corpus -> shards tokenized in parallel -> merged -> a bm25s index directory.

The directory is bm25s's own format (written by `BM25.save`, loadable by `bm25s.BM25.load`), plus
`docids.json` (row -> docid) and `meta.json` (parameters, tokenizer settings, corpus fingerprint, counts), so
queries are always tokenized the way the documents were; and the docids and the vocabulary again as memory-mapped
tables (`docids.strtab`, `vocab.strtab`: rise_batch.index.tables), which the loader maps instead of holding. It is
built in a temporary sibling directory and renamed into place, so a reader never sees half an index.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING

from rise_batch.index.build_options import IndexOptions
from rise_batch.index.plan import later_copy, plan_index_shards
from rise_batch.index.shards import ProcessShardRunner
from rise_batch.index.tables import DOCIDS_FILE, META_FILE, file_sizes, write_docid_table, write_vocab_table
from rise_batch.index.tokenize import TokenizerSettings
from rise_batch.progress import Progress
from rise_batch.safe_read import read_json_file
from rise_batch.storage import AnyPath, ObjectPath, location, publish_tree, redact

if TYPE_CHECKING:
    from rise_batch.corpus.readers import ShardSpec
    from rise_batch.index.merge import GlobalStats  # lazy: loads numpy (the merge step only)
    from rise_batch.index.shards import ShardRunner
    from rise_batch.index.tokenize import ShardPostings
    from rise_batch.types import BadRow

FORMAT = "rise_batch.bm25/1"
K1, B, METHOD = 1.5, 0.75, "lucene"


@dataclass(frozen=True)
class IndexMeta:
    """meta.json, typed. `counts`: n_docs, n_terms, n_postings, n_tokens, n_empty_docs, avg_doc_len. `files`: each
    file's size as built (name -> bytes), the bound each is read with (index/tables.py: recorded_size)."""

    path: str
    k1: float
    b: float
    method: str
    tokenizer: TokenizerSettings
    counts: dict
    corpus: dict
    bm25s_version: str
    build: dict = field(default_factory=dict)
    format: str = FORMAT
    files: dict = field(default_factory=dict)

    @property
    def n_docs(self) -> int:
        return int(self.counts["n_docs"])

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("path")
        d["tokenizer"] = self.tokenizer.to_json()
        return d

    @classmethod
    def read(cls, index_dir: str | Path) -> IndexMeta:
        """meta.json of `index_dir`, opened as every index file is (safe_read: no link, regular, bounded), its
        counts checked to be whole numbers: they bound the other files' sizes when they are opened."""
        p = Path(index_dir) / META_FILE
        try:
            d = read_json_file(p, below=index_dir)
        except FileNotFoundError:
            raise FileNotFoundError(f"{index_dir}: not a rise_batch index (no {META_FILE})") from None
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            got = d.get("format") if isinstance(d, dict) else type(d).__name__
            raise ValueError(f"{p}: unsupported index format {got!r} (expected {FORMAT})")
        counts = d.get("counts")
        bad = [k for k in ("n_docs", "n_terms", "n_postings") if not isinstance((counts or {}).get(k), int)]
        if not isinstance(counts, dict) or bad or set(d) - {f.name for f in fields(cls)}:
            raise ValueError(f"{p}: damaged meta.json (counts {bad or counts!r}, keys {sorted(d)}); rebuild the index")
        try:
            d["tokenizer"] = TokenizerSettings.from_json(d["tokenizer"])
            return cls(path=str(index_dir), **d)
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"{p}: damaged meta.json ({e!r}); rebuild the index") from None


def build_index(
    corpus_path: str | AnyPath,
    out_dir: str | AnyPath,
    workers: int = IndexOptions.workers,
    *,
    shard_docs: int = IndexOptions.shard_docs,
    on_bad_row: str = IndexOptions.on_bad_row,
    runner: ShardRunner | None = None,
    shards: Sequence[ShardSpec] | None = None,
    settings: TokenizerSettings | None = None,
    overwrite: bool = False,
    use_numba: bool | None = None,
    log: Callable[[str], None] | None = None,
    columns: str = "",
    progress: bool = False,
) -> IndexMeta:
    """Build the BM25 index of a corpus (any format of rise_batch.corpus.readers.FORMATS) into `out_dir`.

    `shards` lets a caller that already planned the corpus (the structure job's scan) reuse that plan; otherwise
    shards of about `shard_docs` rows are cut from file metadata. Bad rows and duplicate docids raise
    (`on_bad_row="error"`) or are left out and counted in meta.json ("skip"; the first of duplicates is kept).
    `runner` defaults to `workers` spawned local processes (as with any multiprocessing, a script calling this
    with workers > 1 needs an `if __name__ == "__main__":` guard); rise_batch.index.shards.RayShardRunner runs
    the same per-shard function as Ray tasks. `columns` ("docid=id,text=contents") names the source columns.
    `progress` shows rows tokenized, then the merge (rise_batch.progress: a bar on a terminal, lines elsewhere).
    """
    say = log or (lambda _msg: None)
    t0 = time.perf_counter()
    settings = settings or TokenizerSettings()
    out = location(out_dir)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(f"{out}: exists and is not empty (pass overwrite=True / --overwrite to replace it)")
    shards = list(shards) if shards is not None else plan_index_shards(corpus_path, shard_docs, columns)
    runner = runner or ProcessShardRunner(workers)
    tmp = _staging_dir(out)
    sizes = [None if s.stop is None else s.stop - s.start for s in shards]  # None: a .gz file, read to its end
    bar = Progress("index", 0 if None in sizes else sum(sizes), "rows", enabled=progress)
    try:
        run, shards, n_dups = _tokenize_corpus(shards, runner, settings, on_bad_row, tmp, bar, say)
        t2 = time.perf_counter()
        say(f"tokenized {len(run.merger.docids)} docs in {len(shards)} shards in {t2 - t0:.1f}s")
        bar.set_stage(f"merging and saving {len(run.merger.docids):,} docs")
        n_chars = run.merger.n_chars
        stats, bm25s_version = _save_bm25(run, tmp, use_numba, workers)
        t3 = time.perf_counter()
        say(f"merged and saved in {t3 - t2:.1f}s")
        meta = IndexMeta(
            path=str(out),
            k1=K1,
            b=B,
            method=METHOD,
            tokenizer=settings,
            counts=_counts(stats),
            corpus=_corpus_record(corpus_path, run, n_chars, n_dups),
            bm25s_version=bm25s_version,
            build={
                "runner": runner.name,
                "workers": workers,
                "n_shards": len(shards),
                "seconds": round(t3 - t0, 3),
                "note": "vocabulary ids follow stock bm25s (set order of this process's string hashes)",
            },
            files=file_sizes(tmp),
        )
        (tmp / META_FILE).write_text(json.dumps(meta.to_json(), indent=2, ensure_ascii=False))
        _publish(tmp, out)
        return meta
    finally:
        bar.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _staging_dir(out: AnyPath) -> Path:
    """Where the index is built: a hidden sibling of `out` (renamed into place), or for object storage a temporary
    directory on this machine's disk (published from there, meta.json last)."""
    if isinstance(out, ObjectPath):
        import tempfile

        return Path(tempfile.mkdtemp(prefix="rise-index-"))
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def _tokenize_corpus(
    shards: list[ShardSpec],
    runner: ShardRunner,
    settings: TokenizerSettings,
    on_bad_row: str,
    tmp: Path,
    bar: Progress,
    say: Callable[[str], None],
) -> tuple[_Run, list[ShardSpec], int]:
    """Pass 1 over every shard: (the run, the shards it covers, how many later copies of a docid were left out)."""
    run = _tokenize_all(shards, runner, settings, on_bad_row, tmp / "_spill", bar)
    n_dups = len(run.duplicates)
    if n_dups:  # "skip": leave the later copies out and tokenize again (a rare, exceptional input)
        say(f"{len(run.duplicates)} duplicate docids: tokenizing again without them")
        shards = _with_skipped(shards, run.duplicates)
        bar.set_stage("tokenizing again without duplicates")
        run = _tokenize_all(shards, runner, settings, on_bad_row, tmp / "_spill2")
    return run, shards, n_dups


def _save_bm25(run: _Run, tmp: Path, use_numba: bool | None, workers: int = 1) -> tuple[GlobalStats, str]:
    """Pass 2: merge the postings into the scores matrix (`workers` shards at a time) and save it in bm25s's
    format, the docids and the vocabulary beside it; returns the global statistics and the bm25s version. Frees the
    run's merger."""
    from rise_batch.index.merge import GlobalStats, assemble  # lazy: loads numpy (the merge step only)

    stats = GlobalStats(run.merger, K1, B)
    del run.merger
    data, indices = assemble(stats, lambda i: run.fetchers[i](), use_numba=use_numba, workers=workers)
    import bm25s  # only now: it imports numba and scipy, which the tokenizing phase does not need

    model = bm25s.BM25(k1=K1, b=B, method=METHOD)
    model.scores = {"data": data, "indices": indices, "indptr": stats.indptr, "num_docs": stats.n_docs}
    model.vocab_dict = stats.vocab_dict
    model.nonoccurrence_array = None
    for spill in tmp.glob("_spill*"):
        shutil.rmtree(spill)
    # corpus.jsonl ({"id": row, "docid": ...} per row) lets stock `bm25s.BM25.load(dir, load_corpus=True)` open
    # the directory and return docids with its results, as an index saved by bm25s itself would
    model.save(tmp, corpus=({"id": i, "docid": d} for i, d in enumerate(stats.docids)), show_progress=False)
    (tmp / DOCIDS_FILE).write_text(json.dumps(stats.docids, ensure_ascii=False))
    model.scores = None
    del data, indices  # saved: the tables below need their memory more
    write_docid_table(tmp, stats.docids)
    write_vocab_table(tmp, stats.vocab_dict)
    return stats, bm25s.__version__


def _counts(stats: GlobalStats) -> dict:
    return {
        "n_docs": stats.n_docs,
        "n_terms": stats.n_vocab,
        "n_postings": stats.n_postings,
        "n_tokens": int(stats.doc_lengths.sum()),
        "n_empty_docs": int((stats.doc_lengths == 0).sum()),
        "avg_doc_len": float(stats.avg_doc_len),
    }


def _corpus_record(corpus_path: str | AnyPath, run: _Run, n_chars: int, n_dups: int) -> dict:
    """meta.json's "corpus": what was indexed (its content digest) and what was left out."""
    return {
        "path": redact(corpus_path),
        "content_sha256": run.content.hexdigest(),
        "n_chars": n_chars,
        "n_bad_rows": len(run.bad_rows),
        "n_duplicates_skipped": n_dups,
        "bad_rows": [list(b) for b in run.bad_rows[:100]],
    }


def _publish(tmp: Path, out: AnyPath) -> None:
    """The built directory into place: published to object storage (meta.json last), or renamed over `out`."""
    if isinstance(out, ObjectPath):
        publish_tree(tmp, out, META_FILE, sums=True)  # what each node's cached copy is checked against
        return
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)


class _Run:
    """Pass 1 over all shards: global statistics, postings fetchers, content digest, refused rows."""

    def __init__(self) -> None:
        from rise_batch.index.merge import VocabMerger  # lazy: loads numpy (the merge step only)

        self.merger = VocabMerger()
        self.fetchers: list[Callable[[], ShardPostings]] = []
        self.content = hashlib.sha256()
        self.bad_rows: list[BadRow] = []
        self.duplicates: list[tuple[int, int]] = []  # (shard index, source row) of later copies


def _tokenize_all(
    shards: list[ShardSpec],
    runner: ShardRunner,
    settings: TokenizerSettings,
    on_bad_row: str,
    spill: Path,
    bar: Progress | None = None,
) -> _Run:
    run = _Run()
    first: dict[str, tuple[int, int]] = {}  # docid -> (shard index, source row) of its first occurrence
    for i, (summary, fetch) in enumerate(runner.map(shards, settings, on_bad_row, spill)):
        if bar is not None:
            stop = shards[i].stop
            bar.update(len(summary.docids) + len(summary.bad_rows) if stop is None else stop - shards[i].start)
        run.bad_rows.extend(summary.bad_rows)
        for docid, row in zip(summary.docids, summary.source_rows.tolist(), strict=True):
            if later_copy(first, docid, i, row, shards, on_bad_row):
                run.duplicates.append((i, row))
        if not run.duplicates:
            run.merger.add(summary)
            run.content.update(summary.digests)
            run.fetchers.append(fetch)
    return run


def _with_skipped(shards: list[ShardSpec], duplicates: list[tuple[int, int]]) -> list[ShardSpec]:
    extra: dict[int, list[int]] = {}
    for i, row in duplicates:
        extra.setdefault(i, []).append(row)
    return [s._replace(skip_rows=tuple(sorted({*s.skip_rows, *extra.get(i, ())}))) for i, s in enumerate(shards)]
