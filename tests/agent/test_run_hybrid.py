"""`rise` end to end with `--retriever hybrid` beside bm25 on the same queries: a real hybrid index (wordllama
passages + BM25) over the world's documents, the real CLI in subprocesses (index, run, judge, report, workspace
search), the fake server's scripted agent over HTTP and the real sandbox. A small K (2 per sub-query) makes the
interaction space depend on the retriever, so the hybrid run's workspaces must be the hybrid ranking's."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest

from rise_batch.fake_llm import FakeLLMServer
from rise_batch.space.manifest import read_manifest
from tests.agent.helpers import read_trajectories, run_dir, write_queries
from tests.cli import cli as shared_cli
from tests.conftest import REPO, sample_rows, write_jsonl

HYBRID = "hybrid:weighted:0.7"  # what `hybrid` means
K = 2


cli = partial(shared_cli, check=True)


def demo_queries(docids: set[str]) -> list[dict]:
    """The bundled demo questions whose gold document is in the world (paraphrases, not titles: retrieval matters)."""
    rows = [json.loads(line) for line in (REPO / "jobs" / "queries_demo.jsonl").read_text().splitlines() if line]
    return [r for r in rows if set(r["gold_doc_ids"]) <= docids]


def search_union(index: Path, docs: Path, ws: Path, retriever: str, subqueries: list[str]) -> set[str]:
    """What `rise-batch workspace search` links for these sub-queries: the ranking's own union of top K."""
    argv = ["--index", str(index), "--docs", str(docs), "--workspace", str(ws), "-k", str(K), "--preview", "0"]
    cli("workspace", "search", *argv, "--retriever", retriever, "--", *subqueries)
    return {a.docid for a in read_manifest(ws)}


@pytest.mark.slow
def test_rise_with_hybrid_beside_bm25_end_to_end(agent_world):
    pytest.importorskip("wordllama")
    root = run_dir("hybrid-e2e")
    index = root / "index"
    corpus = write_jsonl(root / "corpus.jsonl", sample_rows(len(agent_world.titles)))
    cli("index", "--corpus", str(corpus), "--out", str(index), "--retriever", "hybrid", "--workers", "1")
    queries = demo_queries(set(agent_world.titles))
    assert len(queries) >= 3
    qfile = write_queries(root / "q.jsonl", queries)

    runs: dict[str, Path] = {}
    with FakeLLMServer() as server:  # the scripted agent and the grader
        for retriever in ("bm25", "hybrid"):
            out = runs[retriever] = root / f"run-{retriever}"
            argv = ["--queries", str(qfile), "--system", "rise", "--index", str(index), "--docs", str(agent_world.docs)]
            argv += ["--out", str(out), "--base-url", server.base_url, "--workers", "0", "--index-backend", "numpy"]
            argv += ["--k", str(K), "--retriever", retriever, "--keep-workspaces", "--concurrency", "2"]
            cli("run", *argv, "--tpm", "100000000", "--rpm", "1000000")
            cli("judge", str(out), "--model", "gpt-5.4-mini", "--base-url", server.base_url)
        cli("report", str(runs["bm25"]), str(runs["hybrid"]), "--out", str(root / "report"))

    spaces: dict[str, dict[str, set[str]]] = {}
    for retriever, out in runs.items():
        meta = json.loads((out / "run.json").read_text())
        assert meta["config"]["retriever"] == retriever
        trajectories = read_trajectories(out)
        assert set(trajectories) == {q["query_id"] for q in queries}
        spaces[retriever] = {}
        for qid, t in trajectories.items():
            assert t["stop_reason"] == "answered", (retriever, qid, t["stop_reason"], t["error"])
            assert t["retriever"] == (HYBRID if retriever == "hybrid" else "bm25")
            search = next(s for s in t["steps"] if s["tool"] == "search")
            subqueries = search["arguments"]["queries"]
            ws = root / f"ws-{retriever}-{qid}"
            expected = search_union(index, agent_world.docs, ws, retriever, subqueries)
            kept = {a.docid for a in read_manifest(out / "workspaces" / qid)}
            assert set(t["retrieved_docids"]) == kept == expected, (retriever, qid)
            spaces[retriever][qid] = kept
    assert spaces["bm25"] != spaces["hybrid"]  # the retriever really changed the interaction spaces

    report = json.loads((root / "report" / "report.json").read_text())
    by = {r["retriever"]: r for r in report["runs"]}
    assert set(by) == {"bm25", HYBRID}
    for r in by.values():
        assert r["n_queries"] == len(queries) and r["gold_R"] is not None
    md = (root / "report" / "report.md").read_text()
    assert f"RISE · {HYBRID}" in md and "RISE · bm25" in md  # two rows a reader can tell apart
