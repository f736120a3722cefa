"""bm25, dense and hybrid retrievers on the bundled sample: the offline embedder against wordllama's own `embed`,
exact dense search against a brute-force float64 cosine, sharded == single-shard builds (local and Ray), fusion
arithmetic on known rankings, refusal of another embedder, and the CLI round trip (index -> eval-retrieval)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rise_batch.cli import main
from rise_batch.errors import ConfigError
from rise_batch.index.search import Hits
from tests.conftest import sample_rows, write_parquet

N = 40


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """The first N bundled sample articles as Parquet in 2 row groups (so 2 shards of 20)."""
    return write_parquet(tmp_path_factory.mktemp("c") / "sample.parquet", sample_rows(N), row_group_size=20)


@pytest.fixture(scope="module")
def hybrid_dir(corpus, tmp_path_factory) -> Path:
    from rise_batch.index import build_index
    from rise_batch.index.dense import build_dense

    out = tmp_path_factory.mktemp("h") / "ix"
    build_index(corpus, out, workers=1)
    build_dense(corpus, out, workers=1, passages="doc")  # one row per document: the exactness test compares rows
    return out


def title_queries(n: int = N) -> list[tuple[str, str]]:
    from rise_batch.corpus.docmap import frontmatter_title

    return [(r["docid"], r.get("title") or frontmatter_title(r["text"]) or "") for r in sample_rows(n)]


def test_embedder_equals_wordllamas_own_embed(tmp_path):
    """Our unpadded mean pooling gives wordllama's `embed(norm=True)` vectors, loaded offline."""
    import shutil

    import wordllama
    from wordllama import WordLlama

    from rise_batch.index.embedders import load_embedder

    tok = tmp_path / "tokenizers"
    tok.mkdir()
    shutil.copy(Path(wordllama.__file__).parent / "tokenizers" / "l2_supercat_tokenizer_config.json", tok)
    ref = WordLlama.load("l2_supercat", cache_dir=tmp_path, dim=256, disable_download=True)
    texts = ["Lyon is a city in France.", "The anarchist movement", "x", "Quantum chromodynamics and the gluon field"]
    ours = load_embedder("wordllama").embed(texts)
    np.testing.assert_allclose(ours, ref.embed(texts, norm=True), rtol=1e-5, atol=1e-6)


def test_a_tokenizer_planted_in_the_cache_is_replaced_by_the_bundled_one(tmp_path, monkeypatch):
    """The tokenizer copy lives under the user's private cache root (never a shared name in /tmp), and what is
    found there is used only when it is byte for byte the bundled file: a planted one of the same size, or a
    link to one, is replaced."""
    import wordllama

    from rise_batch.index.embedders import _load_wordllama, parse_embedder

    def load_embedder(spec):  # past load_embedder's per-process memo: every call reads the cache folder
        return _load_wordllama(parse_embedder(spec))

    bundled = Path(wordllama.__file__).parent / "tokenizers" / "l2_supercat_tokenizer_config.json"
    monkeypatch.setenv("RISE_BATCH_CACHE", str(tmp_path / "cache"))
    want = load_embedder("wordllama").embed(["Lyon is a city in France."])
    copy = tmp_path / "cache" / "wordllama" / "tokenizers" / bundled.name
    assert copy.read_bytes() == bundled.read_bytes() and (tmp_path / "cache").stat().st_mode & 0o077 == 0
    planted = bytearray(bundled.read_bytes())
    planted[planted.index(b'"')] = ord("'")  # same size, other bytes: no longer valid JSON
    for how in ("file", "link"):
        copy.unlink()
        if how == "file":
            copy.write_bytes(bytes(planted))
        else:
            (tmp_path / "elsewhere.json").write_bytes(bytes(planted))
            copy.symlink_to(tmp_path / "elsewhere.json")
        np.testing.assert_array_equal(load_embedder("wordllama").embed(["Lyon is a city in France."]), want)
        assert not copy.is_symlink() and copy.read_bytes() == bundled.read_bytes(), how


def test_each_retriever_finds_articles_by_title(hybrid_dir):
    from rise_batch.index.recall import recall_at
    from rise_batch.index.retriever import open_retriever

    pairs = title_queries()
    for name in ("bm25", "dense", "hybrid", "hybrid:weighted:0.5"):
        r = open_retriever(hybrid_dir, name, backend="numpy")
        hits = r.search([t for _, t in pairs], 10)
        recall = sum(recall_at(h.docids, [d], 10) for (d, _), h in zip(pairs, hits, strict=True)) / len(pairs)
        assert recall >= 0.8, (name, recall)  # a broken retriever (random vectors, wrong rows) lands near 0.25
        assert all(len(h.docids) == len(set(h.docids)) and len(h.docids) <= 10 for h in hits)
        if name != "bm25":  # bm25 returns only documents sharing a term; the others rank every document
            assert all(len(h.docids) == 10 for h in hits)


def test_dense_search_is_exact_cosine(hybrid_dir):
    """Blocked top-k (blocks of 7 rows) equals a float64 brute force over the stored vectors and fresh query
    vectors; the stored vectors are the embedder's, rounded to float16."""
    from rise_batch.index.dense import DenseIndex
    from rise_batch.index.embedders import load_embedder

    ix = DenseIndex(hybrid_dir, block_rows=7)
    docs = np.load(hybrid_dir / "dense" / "embeddings.npy").astype(np.float64)
    rows = {r["docid"]: r["text"] for r in sample_rows(N)}
    fresh = load_embedder("wordllama").embed([rows[d] for d in ix.docids[:5]])
    np.testing.assert_allclose(docs[:5], fresh, atol=1e-3)
    queries = [t for _, t in title_queries(8)]
    q = load_embedder("wordllama").embed(queries).astype(np.float64)
    for hits, scores in zip(ix.search(queries, 12), q @ docs.T, strict=True):
        order = np.argsort(-scores, kind="stable")[:12]
        assert hits.docids == [ix.docids[i] for i in order]
        np.testing.assert_allclose(hits.scores, scores[order], rtol=1e-4)


def test_fusion_arithmetic_on_known_rankings():
    from rise_batch.index.hybrid import rrf, top, weighted

    a = Hits(["a", "b", "c"], [9.0, 5.0, 1.0])
    b = Hits(["c", "a", "d"], [0.9, 0.5, 0.1])
    fused = rrf([a, b], 60)
    assert fused == pytest.approx({"a": 1 / 61 + 1 / 62, "b": 1 / 62, "c": 1 / 63 + 1 / 61, "d": 1 / 63})
    assert top(fused, 3).docids == ["a", "c", "b"]
    w = weighted([a, b], [0.25, 0.75])  # minmax: a 1, .5, 0 ; b 1, .5, 0
    assert w == pytest.approx({"a": 0.25 + 0.75 * 0.5, "b": 0.25 * 0.5, "c": 0.75, "d": 0.0})
    assert top(w, 4).docids == ["c", "a", "b", "d"]
    assert top(rrf([Hits(["x"], [1.0]), Hits(["y"], [1.0])]), 2).docids == ["x", "y"]  # a tie breaks by docid


def test_hybrid_search_is_the_fusion_of_both_lists(hybrid_dir):
    from rise_batch.index.hybrid import rrf, top
    from rise_batch.index.retriever import open_retriever

    queries = [t for _, t in title_queries(6)]
    h = open_retriever(hybrid_dir, "hybrid:rrf:10", backend="numpy")
    bm25 = open_retriever(hybrid_dir, "bm25", backend="numpy").search(queries, N)
    dense = open_retriever(hybrid_dir, "dense").search(queries, N)
    for got, a, b in zip(h.search(queries, 5), bm25, dense, strict=True):
        assert got == top(rrf([a, b], 10), 5)


def test_both_parts_map_one_docid_table_and_hybrid_refuses_parts_that_differ(hybrid_dir, tmp_path):
    """The dense part's docids are the mapped table the BM25 part maps (no list per part); parts over other
    documents are still refused, now by comparing the tables."""
    import shutil

    from rise_batch.index.retriever import open_retriever
    from rise_batch.index.tables import DOCIDS_TABLE
    from rise_batch.strtable import StrColumn

    h = open_retriever(hybrid_dir, "hybrid", backend="numpy")
    assert isinstance(h.bm25.docids, StrColumn) and isinstance(h.dense.docids, StrColumn)
    assert list(h.dense.docids) == json.loads((hybrid_dir / "docids.json").read_text())
    other = tmp_path / "other"
    shutil.copytree(hybrid_dir, other)
    (other / DOCIDS_TABLE).unlink()
    docids = json.loads((other / "docids.json").read_text())
    (other / "docids.json").write_text(json.dumps(docids[::-1]))
    bm25 = open_retriever(hybrid_dir, "bm25", backend="numpy")
    from rise_batch.index.dense import DenseIndex
    from rise_batch.index.hybrid import HybridIndex

    with pytest.raises(ValueError, match="different documents"):
        HybridIndex(bm25, DenseIndex(other))


def test_parse_retriever():
    from rise_batch.index.retriever import parse_retriever

    assert str(parse_retriever(None)) == "bm25"
    assert str(parse_retriever("hybrid")) == "hybrid:weighted:0.7"  # the fusion chosen on squad_wiki's dev half
    assert str(parse_retriever("hybrid:rrf")) == "hybrid:rrf:60"  # the old default, by its explicit spelling
    assert parse_retriever("hybrid:weighted:0.3").weight == 0.3
    for bad in ("bm26", "dense:rrf", "hybrid:max", "hybrid:weighted:2", "hybrid:rrf:x", "hybrid:rrf:nan"):
        with pytest.raises(ConfigError, match="retriever"):
            parse_retriever(bad)


def test_another_embedder_is_refused(hybrid_dir, tmp_path):
    import shutil

    from rise_batch.index.retriever import open_retriever

    with pytest.raises(ConfigError, match=r"embedded with wordllama:l2_supercat:256; a query embedded with .*@64"):
        open_retriever(hybrid_dir, "dense", embedder="wordllama@64")
    other = tmp_path / "ix"
    shutil.copytree(hybrid_dir, other)
    meta = json.loads((other / "dense" / "meta.json").read_text())
    (other / "dense" / "meta.json").write_text(json.dumps({**meta, "weights_sha256": "0" * 64}))
    with pytest.raises(ConfigError, match="another version"):
        open_retriever(other, "hybrid")
    with pytest.raises(ConfigError, match="needs the bm25 and dense parts, and this index holds nothing"):
        open_retriever(tmp_path / "nothing", "hybrid")
    (tmp_path / "nothing" / "dense").mkdir(parents=True)
    shutil.copy(hybrid_dir / "meta.json", tmp_path / "nothing")
    with pytest.raises(ConfigError, match="needs the dense part, and this index holds bm25; build it with"):
        open_retriever(tmp_path / "nothing", "dense")


def _dense_files(d: Path) -> tuple[bytes, list, bytes, str]:
    """Passage vectors, docids, the passage -> document map and meta of a dense build (default passage rule)."""
    meta = json.loads((d / "dense" / "meta.json").read_text())
    offsets = (d / "dense" / "passage_offsets.npy").read_bytes()
    return (d / "dense" / "embeddings.npy").read_bytes(), json.loads((d / "docids.json").read_text()), offsets, meta


def test_sharded_build_equals_one_shard(corpus, hybrid_dir, tmp_path):
    """2 shards in 2 spawned processes == 1 shard inline, byte for byte; the corpus fingerprint equals the BM25
    build's (computed by other code over the same rows)."""
    from rise_batch.index.dense import build_dense

    build_dense(corpus, tmp_path / "one", workers=1, shard_docs=1000)
    m2 = build_dense(corpus, tmp_path / "two", workers=2, shard_docs=20)
    assert m2["build"]["n_shards"] == 2
    one, two = _dense_files(tmp_path / "one"), _dense_files(tmp_path / "two")
    assert one[0] == two[0] and one[1] == two[1] == [r["docid"] for r in sample_rows(N)] and one[2] == two[2]
    bm25 = json.loads((hybrid_dir / "meta.json").read_text())
    assert one[3]["corpus"]["content_sha256"] == two[3]["corpus"]["content_sha256"] == bm25["corpus"]["content_sha256"]


def test_ray_build_equals_local(corpus, tmp_path, ray_local):
    from rise_batch.index.dense import build_dense

    build_dense(corpus, tmp_path / "local", workers=1, shard_docs=20)
    meta = build_dense(corpus, tmp_path / "ray", shard_docs=20, ray={"address": None})
    assert meta["build"]["runner"] == "ray" and meta["build"]["n_shards"] == 2
    assert _dense_files(tmp_path / "local")[:3] == _dense_files(tmp_path / "ray")[:3]


def _assigned(item: int) -> tuple[dict, int]:
    import ray

    return dict(ray.get_runtime_context().get_assigned_resources()), item


def test_task_map_asks_each_task_for_its_resources(ray_local):
    """The options dict (num_gpus for embedding on a GPU cluster) reaches Ray's scheduler: shown with CPUs, the
    resource a CPU-only test machine has."""
    from rise_batch.executor.ray import task_map

    got = [s for s, _ in task_map(_assigned, [1, 2], options={"num_cpus": 2})]
    assert all(g.get("CPU") == 2 for g in got)


def test_cli_round_trip(corpus, tmp_path, capsys):
    out = tmp_path / "ix"
    assert main(["index", "--corpus", str(corpus), "--out", str(out), "--retriever", "hybrid", "--workers", "1"]) == 0
    printed = capsys.readouterr().out
    assert "index dense docs=40 passages=words:200:50 n_passages=" in printed
    assert "embedder=wordllama:l2_supercat:256 dim=256" in printed
    queries = tmp_path / "q.jsonl"
    queries.write_text(
        "".join(json.dumps({"query_id": d, "query": t, "gold_doc_ids": [d]}) + "\n" for d, t in title_queries())
    )
    from rise_batch.index.recall import evaluate_recall
    from rise_batch.index.retriever import open_retriever
    from rise_batch.queries import read_queries

    for name in ("bm25", "dense", "hybrid"):
        res = tmp_path / f"{name}.json"
        trec = tmp_path / f"{name}.trec"
        argv = ["eval-retrieval", "--index", str(out), "--queries", str(queries), "--k", "1,10"]
        assert main([*argv, "--retriever", name, "--out", str(res), "--trec-run", str(trec)]) == 0
        assert f"retriever={name if name != 'hybrid' else 'hybrid:weighted:0.7'} " in capsys.readouterr().out
        summary = json.loads(res.read_text())["summary"]
        expect = evaluate_recall(open_retriever(out, name), read_queries(queries, ids_optional=True), [1, 10])
        assert summary["recall"] == expect["summary"]["recall"]
        tag = f"rise-batch-{name}" + ("-weighted-0.7" if name == "hybrid" else "")
        assert trec.read_text().split("\n")[0].endswith(tag)
    report = tmp_path / "report"
    files = [str(tmp_path / f"{n}.json") for n in ("bm25", "dense", "hybrid")]
    assert main(["report", "--out", str(report), *[x for f in files for x in ("--retrieval", f)]]) == 0
    md = (report / "report.md").read_text()
    assert "| Result | Retriever | Queries | recall@1 % | recall@10 % |" in md and "| dense | dense | 40 |" in md
    assert (report / "recall_retrievers.png").stat().st_size > 0
    capsys.readouterr()
    # a dense-only index: bm25 is refused with the command that builds it
    dense_only = tmp_path / "dense_only"
    assert main(["index", "--corpus", str(corpus), "--out", str(dense_only), "--retriever", "dense"]) == 0
    assert not (dense_only / "meta.json").exists() and (dense_only / "dense" / "embeddings.npy").is_file()
    argv = ["eval-retrieval", "--index", str(dense_only), "--queries", str(queries)]
    assert main([*argv, "--retriever", "bm25"]) == 2
    assert "rise-batch index --retriever bm25" in capsys.readouterr().err
    assert main([*argv, "--retriever", "dense", "--embedder", "wordllama@128"]) == 2
    assert "a query embedded with wordllama:l2_supercat:256@128" in capsys.readouterr().err


def test_without_wordllama_dense_is_a_clear_error_and_bm25_still_works(corpus, tmp_path):
    """A real subprocess where `import wordllama` fails, as on an install without the .[dense] extra."""
    code = "import sys; sys.modules['wordllama'] = None; from rise_batch.cli import main; sys.exit(main(sys.argv[1:]))"
    base = [sys.executable, "-c", code, "index", "--corpus", str(corpus), "--workers", "1"]
    p = subprocess.run([*base, "--out", str(tmp_path / "h"), "--retriever", "hybrid"], capture_output=True, text=True)
    assert p.returncode == 2 and "rise_batch[dense]" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "h").exists()
    p = subprocess.run([*base, "--out", str(tmp_path / "b")], capture_output=True, text=True)
    assert p.returncode == 0 and "index docs=40 " in p.stdout


def test_workspace_search_with_the_dense_retriever(tmp_path, capsys):
    """`workspace search --retriever dense` links exactly the dense top-k into the workspace."""
    import shutil

    from rise_batch.index.dense import DenseIndex, build_dense
    from rise_batch.space.manifest import read_manifest
    from tests.agent.helpers import N_DOCS, world

    w = world()
    index = tmp_path / "index"
    shutil.copytree(w.index, index)
    build_dense(write_parquet(tmp_path / "c.parquet", sample_rows(N_DOCS)), index, workers=1)
    query = "a philosophy that rejects the state"
    ws = tmp_path / "ws"
    argv = ["workspace", "search", "--index", str(index), "--docs", str(w.docs), "--workspace", str(ws), "-k", "7"]
    assert main([*argv, "--retriever", "dense", query]) == 0
    assert "Searched 1 query (top 7 each)." in capsys.readouterr().out
    expected = DenseIndex(index).search([query], 7)[0].docids
    assert sorted(a.docid for a in read_manifest(ws)) == sorted(expected)


def test_run_and_sweep_configs_take_a_retriever(hybrid_dir, tmp_path):
    """`retriever:` in a run config: parsed, checked against the index's parts up front, in the config hash only
    when not bm25 (earlier runs keep their hash); `sweep.retrievers` adds one cell per retriever."""
    from rise_batch.agent.run_config import config_hash, load_run_config
    from rise_batch.eval.sweep import cell_run_config, expand, parse_sweep

    base = dict(queries="q.jsonl", out="o", docs="d", index=str(hybrid_dir), llm_base_url="http://127.0.0.1:9/v1")
    bm25 = load_run_config(None, **base)
    assert bm25.retriever == "bm25" and config_hash(bm25, "p") == config_hash(load_run_config(None, **base), "p")
    hybrid = load_run_config(None, **base, retriever="hybrid")
    assert config_hash(hybrid, "p") != config_hash(bm25, "p")
    with pytest.raises(ConfigError, match="retriever"):
        load_run_config(None, **base, retriever="colbert")
    bm25_only = tmp_path / "bm25_only"
    bm25_only.mkdir()
    (bm25_only / "meta.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"has no dense part \(build it with `rise-batch index --retriever dense`"):
        load_run_config(None, **{**base, "index": str(bm25_only)}, retriever="dense")
    corpus = {"name": "c", "docs": "/d", "index": str(hybrid_dir)}
    sweep = {"out": "/runs/s", "queries": "/q.jsonl", "systems": ["rise", "dci"], "models": ["m"], "corpora": [corpus]}
    sweep["run"] = {"llm": {"base_url": "http://127.0.0.1:1/v1"}}
    cfg = parse_sweep({"sweep": {**sweep, "retrievers": ["bm25", "hybrid:weighted:0.7"]}})
    cells = expand(cfg)
    assert [c.cell_id for c in cells] == [
        "rise__m__k1000__c",
        "rise__m__k1000__c__hybrid-weighted-0.7",
        "dci__m__all__c",
    ]
    assert [cell_run_config(cfg, c).retriever for c in cells] == ["bm25", "hybrid:weighted:0.7", "bm25"]
    with pytest.raises(ConfigError, match=r"sweep.run.retriever .* sweep.retrievers"):
        parse_sweep({"sweep": {**sweep, "run": {"retriever": "dense"}}})


def test_fused_scores_stay_distinct_in_the_search_listing():
    from rise_batch.space.tools import score_text

    assert score_text(4.4853) == "4.49" and score_text(0.77) == "0.77"  # bm25 and cosine as before
    assert score_text(1 / 61 + 1 / 62) == "0.03252" and score_text(1 / 61 + 1 / 63) == "0.03227"  # rrf: 0.03 twice
