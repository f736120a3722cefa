"""The numpy scorer (index/topk.py) against bm25s's numba kernel it replaces by default: the same scores to the bit,
the same documents above the k-th score, equal scores by row; and a searching process imports no numba."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from rise_batch.index import build_index, load_index
from rise_batch.index.topk import top_k
from tests.index.conftest import generated_queries


@pytest.fixture(scope="module")
def built(generated_corpus, tmp_path_factory):
    corpus, rows = generated_corpus
    d = tmp_path_factory.mktemp("topk") / "i"
    build_index(corpus, d, workers=2, shard_docs=1000)
    return d, rows


@pytest.mark.parametrize("k", [1000, 50, 7])
def test_numpy_scorer_gives_the_kernels_scores_and_documents(built, k):
    pytest.importorskip("numba")
    d, rows = built
    kernel, ours = load_index(d, backend="numba"), load_index(d)  # the default is numpy now
    assert ours.backend == "numpy"
    qs = generated_queries(rows, n=150, seed=k)
    differ = 0
    for a, b in zip(kernel.search(qs, k), ours.search(qs, k), strict=True):
        assert a.scores == b.scores  # float32 sums in the same order: equal to the bit, in the same order
        cut = b.scores[-1] if len(b.scores) == k else -1.0
        assert {x for x, s in zip(*a, strict=True) if s > cut} == {x for x, s in zip(*b, strict=True) if s > cut}
        # where a score above the cut is unique in the list, the document at that rank is the same
        once = {s for s in b.scores if b.scores.count(s) == 1 and s > cut}
        assert [x for x, s in zip(*a, strict=True) if s in once] == [x for x, s in zip(*b, strict=True) if s in once]
        row = {docid: i for i, docid in enumerate(ours.docids)}
        ranks = [(-s, row[x]) for x, s in zip(*b, strict=True)]
        assert ranks == sorted(ranks)  # equal scores by row
        differ += a.docids != b.docids
    assert differ  # ties exist in this corpus: the check above is not vacuous


def test_ties_at_the_cut_keep_the_lowest_rows():
    scores = np.array([0, 2, 1, 2, 0, 1, 3, 1, 0], dtype=np.float32)
    rows, vals = top_k(scores, 4)
    assert rows.tolist() == [6, 1, 3, 2] and vals.tolist() == [3, 2, 2, 1]
    rows, vals = top_k(scores, 100)  # fewer matches than k: every match, no score-0 padding
    assert rows.tolist() == [6, 1, 3, 2, 5, 7] and vals.tolist() == [3, 2, 2, 1, 1, 1]
    assert top_k(scores, 0)[0].tolist() == [] and top_k(np.zeros(5, np.float32), 3)[0].tolist() == []


def _reference(scores: np.ndarray, k: int) -> tuple[list, list]:
    rows = np.flatnonzero(scores > 0)
    order = np.lexsort((rows, -scores[rows]))[:k]
    return rows[order].tolist(), scores[rows][order].tolist()


@pytest.mark.parametrize("k", [1000, 100, 1])
def test_top_k_of_a_large_corpus_with_many_ties_is_the_full_sort(k):
    """At 200k documents `top_k` first guesses a floor from a sample; whether the guess holds (scores spread over
    every row) or not (fewer than k documents reach it, most of the best on rows the sample skips), the answer is the
    full sort's."""
    rng = np.random.default_rng(k)
    n = 200_000
    spread = (rng.integers(0, 40, n) * (rng.random(n) < 0.6) / 4).astype(np.float32)  # few distinct values
    hidden = np.zeros(n, np.float32)
    hidden[1::25][: 3 * k] = rng.integers(1, 5, 3 * k)  # best scores off the sample's rows, most rows 0
    hidden[::25][:100] = 10.0  # the sample's best: fewer than k documents reach the guessed floor
    for scores in (spread, hidden):
        rows, vals = top_k(scores, k)
        assert (rows.tolist(), vals.tolist()) == _reference(scores, k)


SEARCHER = """
import json, sys
from rise_batch.index.retriever import open_retriever
from rise_batch.space.docstore import DocStore
index = open_retriever(sys.argv[1], "bm25")
hits = index.search(json.loads(sys.argv[2]), 100)
print(json.dumps({"n": [len(h.docids) for h in hits],
                  "loaded": sorted(m for m in ("numba", "llvmlite", "bm25s", "scipy") if m in sys.modules)}))
"""


def test_a_searching_process_loads_neither_numba_nor_bm25s(built):
    """What a trajectory actor imports to search: ~45 MB of private memory less without numba and its kernel."""
    d, rows = built
    qs = generated_queries(rows, n=5)
    out = subprocess.run([sys.executable, "-c", SEARCHER, str(d), json.dumps(qs)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["loaded"] == [] and sum(got["n"]) > 0
