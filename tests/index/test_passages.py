"""Passage-level dense retrieval on the bundled sample (100 long Wikipedia articles): the passage rule, the
passage -> document map, exact best-passage search, and the reason it exists: a question whose answer sits deep in
a long article is found by passages and not by one whole-document vector."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rise_batch.cli import main
from rise_batch.errors import ConfigError
from rise_batch.index.passages import PassageRule, parse_passages, split_passages
from tests.conftest import sample_rows, write_parquet

# In "Azerbaijan" (86k characters) the UNESCO carpet is mentioned once, at character ~59k, under "Culture".
DEEP_QUESTION, DEEP_GOLD = "Which carpet weaving tradition is on the UNESCO list?", "enwiki-746"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_parquet(tmp_path_factory.mktemp("c") / "sample.parquet", sample_rows())


@pytest.fixture(scope="module")
def built(corpus, tmp_path_factory) -> dict[str, Path]:
    """The same corpus embedded whole ("doc") and by the default passage rule."""
    from rise_batch.index.dense import build_dense

    out = {}
    for rule in ("doc", None):
        out[str(rule)] = tmp_path_factory.mktemp("ix") / "ix"
        build_dense(corpus, out[str(rule)], workers=1, passages=rule)
    return out


def test_parse_passages():
    assert parse_passages(None) == PassageRule("words", 200, 50)
    assert str(parse_passages("doc")) == "doc" and str(parse_passages("words:100")) == "words:100:0"
    for bad in ("words", "words:0", "words:10:10", "words:10:-1", "words:x", "lines:5", "words:1:0:0"):
        with pytest.raises(ConfigError, match=f"passages '{bad}': expected doc or words:N"):
            parse_passages(bad)


def test_windows_overlap_cover_the_body_and_carry_the_title():
    words = [f"w{i}" for i in range(25)]
    text = "---\ntitle: Lyon\nurl: https://x/Lyon\n---\n" + " ".join(words)
    got = split_passages(text, PassageRule("words", 10, 4))
    assert got == [
        "Lyon\n" + " ".join(words[0:10]),
        "Lyon\n" + " ".join(words[6:16]),
        "Lyon\n" + " ".join(words[12:22]),
        "Lyon\n" + " ".join(words[18:25]),
    ]
    assert split_passages(text, PassageRule()) == [text]
    assert split_passages("short text", PassageRule("words", 10, 4)) == ["short text"]
    assert split_passages("", PassageRule("words", 10, 4)) == [""]  # one (empty) passage: the map stays dense
    assert split_passages(" ".join(words), PassageRule("words", 20, 0)) == [" ".join(words[:20]), " ".join(words[20:])]


def test_index_records_its_rule_and_maps_every_passage_to_its_document(built):
    rows = sample_rows()
    d = built["None"] / "dense"
    meta = json.loads((d / "meta.json").read_text())
    offsets = np.load(d / "passage_offsets.npy")
    counts = [len(split_passages(r["text"], PassageRule("words", 200, 50))) for r in rows]
    assert meta["format"] == "rise_batch.dense/2" and meta["n_docs"] == len(rows)
    assert meta["passages"] == {"rule": "words:200:50", "n_passages": sum(counts), "doc_score": "max"}
    assert offsets.tolist() == np.concatenate([[0], np.cumsum(counts)]).tolist()
    assert np.load(d / "embeddings.npy", mmap_mode="r").shape == (sum(counts), 256)
    whole = json.loads((built["doc"] / "dense" / "meta.json").read_text())
    assert whole["passages"]["rule"] == "doc" and not (built["doc"] / "dense" / "passage_offsets.npy").exists()


def test_search_scores_a_document_by_its_best_passage_exactly(built):
    """Blocked search (blocks of 50 passage rows, so documents straddle the nominal block size) equals a float64
    brute force: max over each document's passage rows of the cosine with the query."""
    from rise_batch.index.dense import DenseIndex
    from rise_batch.index.embedders import load_embedder

    ix = DenseIndex(built["None"], block_rows=50)
    vecs = np.load(built["None"] / "dense" / "embeddings.npy").astype(np.float64)
    offsets = np.load(built["None"] / "dense" / "passage_offsets.npy")
    queries = [DEEP_QUESTION, "a philosophy that rejects the state", "moon landing astronauts"]
    sims = load_embedder("wordllama").embed(queries).astype(np.float64) @ vecs.T
    for hits, s in zip(ix.search(queries, 15), sims, strict=True):
        best = np.array([s[a:b].max() for a, b in zip(offsets[:-1], offsets[1:], strict=True)])
        order = np.lexsort((np.arange(len(best)), -best))[:15]
        assert hits.docids == [ix.docids[i] for i in order]
        np.testing.assert_allclose(hits.scores, best[order], rtol=1e-4)


def test_an_answer_deep_in_a_long_document_is_found_by_passages_not_by_the_whole(built):
    from rise_batch.index.retriever import open_retriever

    def rank(index_dir: Path) -> int:
        return open_retriever(index_dir, "dense").search([DEEP_QUESTION], 100)[0].docids.index(DEEP_GOLD) + 1

    assert rank(built["None"]) <= 3
    assert rank(built["doc"]) > 10


def test_an_index_from_before_passages_is_read_as_one_row_per_document(built, tmp_path):
    import shutil

    from rise_batch.index.dense import DenseIndex

    old = tmp_path / "old"
    shutil.copytree(built["doc"], old)
    meta = json.loads((old / "dense" / "meta.json").read_text())
    del meta["passages"]
    (old / "dense" / "meta.json").write_text(json.dumps({**meta, "format": "rise_batch.dense/1"}))
    assert DenseIndex(old).search([DEEP_QUESTION], 5) == DenseIndex(built["doc"]).search([DEEP_QUESTION], 5)


def test_cli_builds_the_rule_asked_and_refuses_a_bad_one_before_building(corpus, tmp_path, capsys):
    out = tmp_path / "ix"
    argv = ["index", "--corpus", str(corpus), "--retriever", "hybrid", "--workers", "1"]
    assert main([*argv, "--out", str(out), "--passages", "words:400:100"]) == 0
    assert "passages=words:400:100 n_passages=" in capsys.readouterr().out
    assert json.loads((out / "dense" / "meta.json").read_text())["passages"]["rule"] == "words:400:100"
    assert main([*argv, "--out", str(tmp_path / "bad"), "--passages", "words:10:10"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "passages 'words:10:10'" in err[0] and not (tmp_path / "bad").exists()


def test_a_passage_map_that_does_not_fit_is_refused(built, tmp_path):
    import shutil

    from rise_batch.index.dense import DenseIndex

    bad = tmp_path / "bad"
    shutil.copytree(built["None"], bad)
    offsets = np.load(bad / "dense" / "passage_offsets.npy")
    offsets[5] = offsets[4]  # document 4 would own no passage
    np.save(bad / "dense" / "passage_offsets.npy", offsets)
    with pytest.raises(ValueError, match=r"passage_offsets.npy: not 100 \+ 1 increasing offsets"):
        DenseIndex(bad)
