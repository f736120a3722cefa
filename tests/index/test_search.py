"""Search semantics: k clamped, padding dropped, unknown-term queries empty, numba and numpy agree."""

from __future__ import annotations

import numpy as np
import pytest

from rise_batch.index import BM25Index, Hits, build_index, load_index
from tests.conftest import write_jsonl
from tests.index.conftest import generated_queries

ROWS = [
    {"docid": "fr", "text": "Paris is the capital of France. Paris, Paris!"},
    {"docid": "de", "text": "Berlin is the capital of Germany"},
    {"docid": "empty", "text": "the of and ..."},
    {"docid": "jp", "text": "東京都 is the capital of Japan; café naïve"},
    {"docid": "river", "text": "The Seine flows through Paris"},
]


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> BM25Index:
    d = tmp_path_factory.mktemp("small")
    write_jsonl(d / "c.jsonl", ROWS)
    build_index(d / "c.jsonl", d / "i", workers=1)
    return load_index(d / "i", backend="numpy")


def test_k_larger_than_corpus_is_clamped_and_padding_dropped(small):
    (hits,) = small.search(["paris"], 1000)
    assert isinstance(hits, Hits)
    assert hits.docids == ["fr", "river"]  # 3 Paris in a short doc beat 1 Paris
    assert hits.scores[0] > hits.scores[1] > 0
    assert len(small) == 5 and small.docids == [r["docid"] for r in ROWS]


def test_queries_without_known_terms_give_empty_hits(small):
    res = small.search(["zzqx unknownword", "the of and", "", "!!!", "capital"], 3)
    assert [h.docids for h in res[:4]] == [[], [], [], []]
    assert all(h.scores == [] for h in res[:4])
    assert len(res[4].docids) == 3 and set(res[4].docids) <= {"fr", "de", "jp"}


def test_non_ascii_and_case_insensitive_terms_match(small):
    a, b = small.search(["東京都", "CAFÉ Naïve"], 5)
    assert a.docids == ["jp"] and b.docids == ["jp"]


def test_several_queries_at_once_equal_one_by_one(small):
    qs = ["paris capital", "germany", "seine paris", "nothing here"]
    assert small.search(qs, 10) == [small.search([q], 10)[0] for q in qs]
    assert small.search([], 10) == []
    assert small.search(["paris"], 0) == [Hits([], [])]
    with pytest.raises(TypeError):
        small.search("paris", 10)


def test_numba_backend_equals_numpy_backend(generated_corpus, tmp_path):
    pytest.importorskip("numba")
    corpus, rows = generated_corpus
    build_index(corpus, tmp_path / "i", workers=2, shard_docs=1000)
    fast = load_index(tmp_path / "i", backend="numba")  # warm-up compiles here (or loads numba's disk cache)
    slow = load_index(tmp_path / "i", backend="numpy")
    qs = generated_queries(rows, n=100)
    for a, b in zip(fast.search(qs, 1000), slow.search(qs, 1000), strict=True):
        np.testing.assert_allclose(a.scores, b.scores, rtol=1e-6)
        cut = b.scores[-1] if len(b.scores) == 1000 else -1
        assert {d for d, s in zip(*a, strict=True) if s > cut} == {d for d, s in zip(*b, strict=True) if s > cut}


def test_concurrent_searches_from_threads_agree_with_sequential(generated_corpus, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    corpus, rows = generated_corpus
    build_index(corpus, tmp_path / "i", workers=1, shard_docs=3000)
    index = load_index(tmp_path / "i")
    batches = [generated_queries(rows, n=10, seed=s) for s in range(16)]
    expected = [index.search(b, 100) for b in batches]
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(lambda b: index.search(b, 100), batches)) == expected


def test_stock_bm25s_loads_the_directory(small):
    import bm25s

    model = bm25s.BM25.load(small.path, mmap=True)
    assert model.scores["num_docs"] == 5 and model.k1 == 1.5 and model.b == 0.75 and model.method == "lucene"
