"""Merge shard outputs into one bm25s index that is equal, array for array, to stock bm25s's.

bm25s has no merge or append API, so this module re-derives what `bm25s.tokenize` + `BM25.index` compute
(bm25s 0.3.16, method "lucene"), from per-shard statistics:

* Vocabulary ids. Stock stems the distinct words in first-appearance order and numbers the stems in the
  iteration order of `set(stems)`. Shards are merged in corpus order, so the global first-appearance order of
  terms is known; building the same `set` from it in this process gives the same ids (a Python `set` of strings
  iterates in hash order, so stock's ids themselves depend on the process's hash seed; search results do not).
* idf with `math.log` per term, stored as float32; tf-components in float64 exactly as numpy promotes stock's
  `tf(float32) / (k1 * ((1 - b) + b * l_d / l_avg) + tf)`; score = float32(idf * tfc).
* The CSC arrays (data float32, indices int32, indptr int64) sorted by (term, doc): postings are scattered into
  their column in corpus order, which is the order stock's sort produces.

Memory is the final index (8 bytes per posting) plus one shard, whatever the size of the corpus text.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from rise_batch.index.tokenize import ShardPostings, ShardSummary


class VocabMerger:
    """Pass 1: global statistics from shard summaries, fed in corpus order."""

    def __init__(self) -> None:
        self.first_id: dict[str, int] = {}  # term -> rank of its first appearance in the corpus
        self.order: list[str] = []
        self.df = np.zeros(1024, dtype=np.int64)  # indexed by first-appearance rank
        self.lengths: list[np.ndarray] = []
        self.docids: list[str] = []
        self.local_maps: list[np.ndarray] = []  # per shard: local term id -> first-appearance rank
        self.n_postings = 0
        self.n_chars = 0

    def add(self, s: ShardSummary) -> None:
        ids = self.first_id
        new = [t for t in s.vocab if t not in ids]
        ids.update(zip(new, range(len(self.order), len(self.order) + len(new)), strict=True))
        self.order.extend(new)
        m = np.fromiter(map(ids.__getitem__, s.vocab), dtype=np.int32, count=len(s.vocab))
        if len(self.order) > len(self.df):
            self.df = np.concatenate([self.df, np.zeros(max(len(self.order), 2 * len(self.df)), np.int64)])
        self.df[m] += s.df  # m is injective: one local term, one global term
        self.local_maps.append(m)
        self.lengths.append(np.asarray(s.lengths, dtype=np.int64))
        self.docids.extend(s.docids)
        self.n_postings += int(s.df.sum())
        self.n_chars += s.n_chars


class GlobalStats:
    """Pass 1 result: stock's vocabulary, idf and column layout."""

    def __init__(self, merger: VocabMerger, k1: float, b: float) -> None:
        if not merger.order:
            raise ValueError("the corpus yields no indexable terms (every document is empty or stopwords only)")
        self.k1, self.b = k1, b
        self.docids = merger.docids
        self.doc_lengths = np.concatenate(merger.lengths) if merger.lengths else np.zeros(0, np.int64)
        self.n_docs = len(self.doc_lengths)
        # Same expression as stock (`np.array([len(ids) ...]).mean()`): an int64 mean, exact in float64.
        self.avg_doc_len = self.doc_lengths.mean()
        vocab = set(merger.order)  # stock: `vocab = set(tokens_stemmed)`, fed in first-appearance order
        self.vocab_dict: dict[str, int] = {t: i for i, t in enumerate(vocab)}
        del vocab
        self.n_vocab = len(self.vocab_dict)
        self.first_to_final = np.fromiter(
            map(self.vocab_dict.__getitem__, merger.order), dtype=np.int32, count=self.n_vocab
        )
        df = np.zeros(self.n_vocab, dtype=np.int64)
        df[self.first_to_final] = merger.df[: self.n_vocab]
        n = self.n_docs
        # Stock `_build_idf_array`: python-float math.log per term, stored as float32.
        self.idf = np.array([math.log(1 + (n - d + 0.5) / (d + 0.5)) for d in df.tolist()], dtype=np.float32)
        self.indptr = np.zeros(self.n_vocab + 1, dtype=np.int64)
        np.cumsum(df, out=self.indptr[1:])
        self.n_postings = int(self.indptr[-1])
        self.local_maps = merger.local_maps  # local id -> final id, converted in place (they add up to GBs at 1M docs)
        for i, m in enumerate(self.local_maps):
            self.local_maps[i] = self.first_to_final[m]
        self.row_offsets = np.concatenate([[0], np.cumsum([len(x) for x in merger.lengths])]).astype(np.int64)
        if "" not in self.vocab_dict:  # stock `index(create_empty_token=True)`: a term with no column
            self.vocab_dict[""] = self.n_vocab


def score_postings(stats: GlobalStats, p: ShardPostings, cols: np.ndarray, row_offset: int) -> np.ndarray:
    """BM25 "lucene" scores of one shard's postings, bit-for-bit as stock computes them."""
    l_d = stats.doc_lengths[row_offset + p.rows.astype(np.int64)].astype(np.float64)
    denom = stats.k1 * ((1 - stats.b) + stats.b * l_d / stats.avg_doc_len)
    tf = p.tfs.astype(np.float32).astype(np.float64)
    tfc = tf / (denom + tf)
    return (stats.idf[cols].astype(np.float64) * tfc).astype(np.float32)


def _scatter_numpy(
    cols: np.ndarray, rows: np.ndarray, vals: np.ndarray, heads: np.ndarray, data: np.ndarray, indices: np.ndarray
) -> None:
    order = np.argsort(cols, kind="stable")  # postings arrive row-sorted; stable keeps rows sorted per column
    c = cols[order]
    n = len(c)
    starts = np.flatnonzero(np.concatenate([[True], c[1:] != c[:-1]]))
    sizes = np.diff(np.append(starts, n))
    pos = heads[c] + (np.arange(n) - np.repeat(starts, sizes))
    data[pos] = vals[order]
    indices[pos] = rows[order]
    heads[c[starts]] += sizes


def _scatter_loop(cols, rows, vals, heads, data, indices) -> None:  # compiled by numba when available
    for i in range(cols.shape[0]):
        c = cols[i]
        p = heads[c]
        data[p] = vals[i]
        indices[p] = rows[i]
        heads[c] = p + 1


_NUMBA_SCATTER = None


def scatter_function(use_numba: bool | None = None) -> Callable[..., None]:
    """Counting-sort scatter: numba's plain loop when available (no sort; cached on disk), else numpy's sort."""
    global _NUMBA_SCATTER
    if use_numba is not False:
        try:
            from numba import njit
        except ImportError:
            if use_numba:
                raise
        else:
            if _NUMBA_SCATTER is None:
                _NUMBA_SCATTER = njit(nogil=True, cache=True)(_scatter_loop)
            return _NUMBA_SCATTER
    return _scatter_numpy


def assemble(
    stats: GlobalStats,
    fetch: Callable[[int], ShardPostings],
    use_numba: bool | None = None,
    workers: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """Pass 2: fill stock's CSC `data` and `indices` from every shard's postings, `workers` shards at a time.

    Where a shard's postings of a term go is known before its neighbours are placed: after every posting of that
    term in the shards before it, which is the running count of each term over the shards in corpus order. So this
    thread walks the shards in order doing only that count (one bincount per shard, one gather over its terms) and
    hands each shard, with the positions its terms start at, to a pool that loads, scores and scatters shards side by
    side (numpy and the numba scatter release the GIL). Every posting lands where the serial merge put it: the
    arrays are the same, byte for byte (tested), for any `workers`."""
    scatter = scatter_function(use_numba)
    data = np.empty(stats.n_postings, dtype=np.float32)
    indices = np.empty(stats.n_postings, dtype=np.int32)
    placed = np.zeros(stats.n_vocab, dtype=np.int64)  # postings of each term placed by the shards walked so far
    workers = max(1, int(workers))

    def load(i: int) -> tuple[ShardPostings, np.ndarray]:
        p = fetch(i)
        return p, np.bincount(p.terms, minlength=len(stats.local_maps[i]))

    def place(i: int, p: ShardPostings, heads: np.ndarray) -> None:
        offset = int(stats.row_offsets[i])
        vals = score_postings(stats, p, stats.local_maps[i][p.terms], offset)
        rows = (p.rows.astype(np.int64) + offset).astype(np.int32)
        scatter(p.terms, rows, vals, heads, data, indices)  # heads and terms shard-local: no two shards share one

    n = len(stats.local_maps)
    with ThreadPoolExecutor(workers, thread_name_prefix="bm25-merge") as pool:
        loads = {i: pool.submit(load, i) for i in range(min(n, workers))}
        busy: deque[Future] = deque()
        for i in range(n):
            p, counts = loads.pop(i).result()
            if i + workers < n:
                loads[i + workers] = pool.submit(load, i + workers)
            cols = stats.local_maps[i]
            heads = stats.indptr[cols] + placed[cols]
            placed[cols] += counts
            busy.append(pool.submit(place, i, p, heads))
            del p
            while len(busy) > workers or (busy and busy[0].done()):
                busy.popleft().result()
        for f in busy:
            f.result()
    if not np.array_equal(placed, np.diff(stats.indptr)):
        raise RuntimeError("internal error: postings do not fill the index exactly (shard statistics mismatch)")
    return data, indices
