"""The sharded, parallel build writes the very index stock bm25s builds in one process."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rise_batch.corpus.readers import CorpusError
from rise_batch.index import build_index, load_index
from tests.conftest import sample_rows, write_jsonl, write_parquet
from tests.index.conftest import (
    assert_same_arrays,
    assert_same_hits,
    generated_queries,
    stock_index,
    stock_search,
)


@pytest.fixture(scope="module")
def generated_built(generated_corpus, tmp_path_factory):
    corpus, rows = generated_corpus
    root = tmp_path_factory.mktemp("built")
    meta = build_index(corpus, root / "ours", workers=2, shard_docs=250)
    stock = stock_index([r["text"] for r in rows])
    stock.save(root / "stock", show_progress=False)
    return root, rows, meta, stock


def test_generated_corpus_arrays_equal_stock(generated_built):
    root, rows, meta, _ = generated_built
    assert_same_arrays(root / "ours", root / "stock")
    assert json.loads((root / "ours" / "docids.json").read_text()) == [r["docid"] for r in rows]
    assert meta.n_docs == len(rows) and meta.build["n_shards"] == 12  # 3 files x 4 row groups of 250 rows


def test_generated_corpus_top_1000_equal_stock(generated_built):
    root, rows, _, stock = generated_built
    index = load_index(root / "ours", backend="numpy")
    queries = generated_queries(rows)
    docids = [r["docid"] for r in rows]
    ours = index.search(queries, 1000)
    ref = stock_search(stock, docids, queries, 1000)
    assert sum(1 for h in ours if h.docids) > 250
    for h, r in zip(ours, ref, strict=True):
        assert_same_hits(h, r, 1000)


def test_sample_corpus_equal_stock_and_independent_of_sharding(tmp_path, sample_path):
    rows = sample_rows()
    write_parquet(tmp_path / "sample.parquet", rows, row_group_size=7)
    build_index(tmp_path / "sample.parquet", tmp_path / "a", workers=2, shard_docs=7)
    build_index(sample_path, tmp_path / "b", workers=1)  # jsonl.gz: one shard, tokenized inline
    stock = stock_index([r["text"] for r in rows])
    stock.save(tmp_path / "stock", show_progress=False)
    assert_same_arrays(tmp_path / "a", tmp_path / "stock")
    assert_same_arrays(tmp_path / "b", tmp_path / "stock")
    a, b = (json.loads((tmp_path / x / "meta.json").read_text()) for x in "ab")
    assert a["corpus"]["content_sha256"] == b["corpus"]["content_sha256"]
    assert a["counts"] == b["counts"]
    # a few hundred queries: titles, and word runs cut from the documents themselves
    index = load_index(tmp_path / "a", backend="numpy")
    queries = [r["text"].split("\n")[1][7:] for r in rows]
    queries += [" ".join(r["text"].split()[i : i + 4]) for r in rows for i in (40, 400)]
    docids = [r["docid"] for r in rows]
    for h, r in zip(index.search(queries, 1000), stock_search(stock, docids, queries, 1000), strict=True):
        assert_same_hits(h, r, 1000)


def test_numpy_scatter_equals_numba_scatter(tmp_path, generated_corpus):
    corpus, _ = generated_corpus
    build_index(corpus, tmp_path / "np", workers=1, shard_docs=500, use_numba=False)
    build_index(corpus, tmp_path / "nb", workers=1, shard_docs=500, use_numba=True)
    assert_same_arrays(tmp_path / "np", tmp_path / "nb")


def test_meta_records_settings_counts_and_fingerprint(generated_built):
    root, rows, meta, _ = generated_built
    m = json.loads((root / "ours" / "meta.json").read_text())
    assert m["k1"] == 1.5 and m["b"] == 0.75 and m["method"] == "lucene"
    assert m["tokenizer"] == {"lower": True, "token_pattern": r"(?u)\b\w\w+\b", "stopwords": "en", "stemmer": "english"}
    assert m["bm25s_version"] == "0.3.16"
    n_empty = sum(1 for r in rows if r["text"].startswith(("The and", "!")))
    assert m["counts"]["n_empty_docs"] == meta.counts["n_empty_docs"] == n_empty > 0
    assert m["counts"]["n_postings"] == len(np.load(root / "ours" / "data.csc.index.npy"))
    assert len(m["corpus"]["content_sha256"]) == 64


def test_empty_and_stopword_only_docs_keep_rows_aligned(tmp_path):
    rows = [
        {"docid": "d0", "text": "The and of the"},
        {"docid": "d1", "text": "zebra crossing"},
        {"docid": "d2", "text": "!!! ... ???"},
        {"docid": "d3", "text": "zebras crossed the river"},
        {"docid": "d4", "text": "a b c"},
        {"docid": "d5", "text": "river bank"},
    ]
    write_jsonl(tmp_path / "c.jsonl", rows)
    meta = build_index(tmp_path / "c.jsonl", tmp_path / "i", workers=2, shard_docs=2)
    assert meta.counts["n_empty_docs"] == 3
    stock = stock_index([r["text"] for r in rows])
    stock.save(tmp_path / "stock", show_progress=False)
    assert_same_arrays(tmp_path / "i", tmp_path / "stock")
    index = load_index(tmp_path / "i", backend="numpy")
    (zebra, river, none) = index.search(["zebra", "river", "the"], 10)
    assert sorted(zebra.docids) == ["d1", "d3"]
    assert sorted(river.docids) == ["d3", "d5"]
    assert none.docids == [] and none.scores == []


def test_bad_rows_and_duplicates_error_or_skip(tmp_path):
    rows = [{"docid": f"d{i}", "text": f"word{i} common"} for i in range(10)]
    rows[3]["text"] = "   "
    rows[7]["docid"] = "d2"
    write_jsonl(tmp_path / "c.jsonl", rows)
    with pytest.raises(CorpusError, match="row 3"):
        build_index(tmp_path / "c.jsonl", tmp_path / "e", shard_docs=4)
    rows[3]["text"] = "word3 common"
    write_jsonl(tmp_path / "c.jsonl", rows)
    with pytest.raises(CorpusError, match="duplicate docid 'd2'"):
        build_index(tmp_path / "c.jsonl", tmp_path / "e", shard_docs=4)
    rows[3]["text"] = ""
    write_jsonl(tmp_path / "c.jsonl", rows)
    meta = build_index(tmp_path / "c.jsonl", tmp_path / "s", shard_docs=4, on_bad_row="skip")
    docids = json.loads((tmp_path / "s" / "docids.json").read_text())
    assert docids == ["d0", "d1", "d2", "d4", "d5", "d6", "d8", "d9"]
    assert meta.corpus["n_bad_rows"] == 1 and meta.corpus["n_duplicates_skipped"] == 1
    index = load_index(tmp_path / "s", backend="numpy")
    for i in (0, 4, 8, 9):  # rows after the skipped ones still point at their own documents
        assert index.search([f"word{i}"], 5)[0].docids == [f"d{i}"]
    assert index.search(["word7"], 5)[0].docids == []  # the duplicate's text is not indexed


def test_existing_output_is_refused_unless_overwrite(tmp_path, sample_path):
    (tmp_path / "i").mkdir()
    (tmp_path / "i" / "x").write_text("keep")
    with pytest.raises(FileExistsError):
        build_index(sample_path, tmp_path / "i", workers=1)
    assert (tmp_path / "i" / "x").read_text() == "keep"
    build_index(sample_path, tmp_path / "i", workers=1, overwrite=True)
    assert not (tmp_path / "i" / "x").exists() and (tmp_path / "i" / "meta.json").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["i"]  # no temporary directory left behind


def test_stock_bm25s_opens_the_index_with_its_corpus_of_docids(generated_built):
    """`bm25s.BM25.load(dir, load_corpus=True)` (a user's own bm25s code) gets the docids back with its results."""
    import bm25s
    import Stemmer

    root, rows, _, _ = generated_built
    stock = bm25s.BM25.load(root / "ours", load_corpus=True)
    assert [d["docid"] for d in stock.corpus] == [r["docid"] for r in rows]
    ours = load_index(root / "ours", backend="numpy")
    query = generated_queries(rows)[0]
    tok = bm25s.tokenize([query], stopwords="en", stemmer=Stemmer.Stemmer("english"), show_progress=False)
    ids = stock.get_tokens_ids(bm25s.tokenization.convert_tokenized_to_string_list(tok)[0])
    docs, scores = stock.retrieve([ids], k=5, show_progress=False)
    top = ours.search([query], 5)[0]
    assert [d["docid"] for d, s in zip(docs[0], scores[0], strict=True) if s > 0][:1] == top.docids[:1]


def test_the_parallel_merge_writes_the_serial_merges_bytes(tmp_path, generated_corpus):
    """Shards scored and scattered side by side land where the one-shard-at-a-time merge puts them."""
    from rise_batch.index.build import _tokenize_all
    from rise_batch.index.merge import GlobalStats, assemble
    from rise_batch.index.plan import plan_index_shards
    from rise_batch.index.shards import ProcessShardRunner
    from rise_batch.index.tokenize import TokenizerSettings

    corpus, _ = generated_corpus
    run = _tokenize_all(plan_index_shards(corpus, 100), ProcessShardRunner(1), TokenizerSettings(), "error", tmp_path)
    stats = GlobalStats(run.merger, 1.5, 0.75)
    assert len(stats.local_maps) > 20

    def fetch(i):
        return run.fetchers[i]()

    serial = [a.tobytes() for a in assemble(stats, fetch, workers=1)]
    for use_numba in (True, False):
        for workers in (2, 5):
            got = assemble(stats, fetch, use_numba=use_numba, workers=workers)
            assert [a.tobytes() for a in got] == serial, (use_numba, workers)
