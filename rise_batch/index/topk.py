"""BM25 top-k over the memory-mapped score matrix in plain numpy: no numba, no bm25s, no scipy in the process.

bm25s's numba kernel made a search process import numba and llvmlite and load its machine code: ~45 MB private
memory in every trajectory actor (24 MB the import, 20 MB the loaded kernel; numba's typing tables are per-process
Python objects, nothing the page cache shares) and 1-2 s of CPU at start. bm25s's own numpy path avoids that but
selects with `np.argpartition` over every document, which at 1M documents is ~180 ms a query (the array is mostly
zeros, introselect's worst case). Here the scores are summed exactly as the kernel sums them (float32, term after
term in query order, one addition per posting, so the same values to the bit), then the top k are chosen among the
matching documents only.

Ties are ordered, not left to a heap: by score (best first), then by row (the index's document order). bm25s's
kernel orders equal scores by where they sit in its heap, so between the two the scores are identical and the
documents above the k-th score are the same set; equal scores may come in another order, and where more documents
share the k-th score than there are places, the lowest rows are the ones kept.
"""

from __future__ import annotations

import numpy as np


def bm25_scores(
    data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, num_docs: int, term_ids: list[int]
) -> np.ndarray:
    """Every document's score for one query (float32, 0 where no term matches); a repeated term counts twice."""
    scores = np.zeros(num_docs, dtype=np.float32)
    for t in term_ids:
        start, end = int(indptr[t]), int(indptr[t + 1])
        # ufunc.at: one in-order float32 addition per posting (a column's rows are unique, but add.at does not
        # rely on it), the kernel's `scores[indices[j]] += data[j]`
        np.add.at(scores, indices[start:end], data[start:end])
    return scores


def top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, scores) of the k best documents with a score above 0, best first, equal scores by row."""
    if k <= 0:
        return np.zeros(0, np.int64), scores[:0]
    rows = None
    floor = _floor(scores, k)
    if floor > 0:  # the documents scoring at least `floor`: if k or more, the k best are among them
        rows = np.flatnonzero(scores >= floor)
        if len(rows) < k:
            rows = None
    if rows is None:
        rows = np.flatnonzero(scores > 0)
    vals = scores[rows]
    if len(rows) > k:
        cut = np.partition(vals, len(vals) - k)[len(vals) - k]  # the k-th best score
        above = vals > cut
        ties = np.flatnonzero(vals == cut)[: k - int(above.sum())]  # rows ascend: the lowest rows at the cut
        keep = np.flatnonzero(above)
        keep = np.sort(np.concatenate([keep, ties]))
        rows, vals = rows[keep], vals[keep]
    order = np.lexsort((rows, -vals))  # score descending, then row ascending
    return rows[order], vals[order]


def _floor(scores: np.ndarray, k: int) -> float:
    """A score that probably ~2k documents reach, from every `step`-th document's score (~8k of them), or 0.

    Choosing among every matching document costs a partition of all of them, ~4 ms for 160k matches (scores repeat
    a lot, which numpy's selection handles slowly); among the few thousand at or above this floor, a tenth of that.
    It is only a guess: `top_k` checks that at least k documents reach it and otherwise chooses among all matches,
    so the answer never depends on it."""
    step = len(scores) // (8 * k)
    if step < 2:
        return 0.0
    sample = scores[::step]
    rank = 2 * k // step + 1  # the sample's rank-th best: ~2k documents of the whole at or above it
    if rank >= len(sample):
        return 0.0
    return float(np.partition(sample, len(sample) - rank)[len(sample) - rank])


def search_arrays(arrays: dict, term_ids: list[int], k: int) -> tuple[np.ndarray, np.ndarray]:
    """One query over an index's arrays (`data`, `indices`, `indptr`, `num_docs`): its top-k (rows, scores)."""
    scores = bm25_scores(arrays["data"], arrays["indices"], arrays["indptr"], arrays["num_docs"], term_ids)
    return top_k(scores, k)
