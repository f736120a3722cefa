"""A retriever defined entirely in this file, as a researcher outside the package would add one: TF-IDF cosine over
lowercase words, one `IndexPart` (how `rise-batch index` builds it, its marker) and one `RetrieverKind` (how it
opens), loaded through $RISE_BATCH_PLUGINS (`module:function`). The real CLI, in subprocesses, builds an index with
`rise-batch index --retriever tfidf`, evaluates it with `eval-retrieval` and runs the scripted agent on it with
`rise-batch run` against the fake LLM server; nothing in rise_batch names it."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from rise_batch.corpus.readers import iter_docs
from rise_batch.index.retriever_kinds import DOCIDS_FILE, PARTS, RETRIEVERS, IndexPart, PartBuild, RetrieverKind
from rise_batch.index.search import Hits, clamp_k
from tests.cli import cli

PLUGIN = {"RISE_BATCH_PLUGINS": f"{__name__}:register"}
WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def build_tfidf(job: PartBuild) -> str:
    """The part: `tfidf/weights.json` (idf, and each document's unit-length tf-idf vector), `docids.json` (every
    index holds it), and the marker `tfidf/meta.json` last."""
    docids: list[str] = []
    counts: list[Counter[str]] = []
    for doc in iter_docs(job.corpus, on_bad_row=job.on_bad_row, columns=job.columns):
        if doc.docid not in docids:
            docids.append(doc.docid)
            counts.append(Counter(words(doc.text)))
    df = Counter(term for c in counts for term in c)
    idf = {term: math.log(len(counts) / n) + 1.0 for term, n in df.items()}
    vectors = [unit({t: tf * idf[t] for t, tf in c.items()}) for c in counts]
    part = Path(job.out) / "tfidf"
    part.mkdir(parents=True)
    (part / "weights.json").write_text(json.dumps({"idf": idf, "docs": vectors}))
    (Path(job.out) / DOCIDS_FILE).write_text(json.dumps(docids))
    (part / "meta.json").write_text(json.dumps({"n_docs": len(docids), "n_terms": len(idf)}))
    return f"index tfidf docs={len(docids)} terms={len(idf)}"


def unit(vector: dict[str, float]) -> dict[str, float]:
    norm = math.sqrt(sum(w * w for w in vector.values())) or 1.0
    return {t: w / norm for t, w in vector.items()}


class TfidfIndex:
    """`search(queries, k)`, `docids`, `len()`: what every retriever offers."""

    def __init__(self, index_dir: str | Path, spec: Any = None, **_: Any) -> None:
        weights = json.loads((Path(index_dir) / "tfidf" / "weights.json").read_text())
        self.idf, self.vectors = weights["idf"], weights["docs"]
        self.docids: list[str] = json.loads((Path(index_dir) / DOCIDS_FILE).read_text())

    def __len__(self) -> int:
        return len(self.docids)

    def search(self, queries: list[str], k: int) -> list[Hits]:
        k = clamp_k(queries, k, len(self))
        out = []
        for query in queries:
            q = unit({t: n * self.idf[t] for t, n in Counter(words(query)).items() if t in self.idf})
            pairs = zip(self.vectors, self.docids, strict=True)
            scores = [(sum(w * v.get(t, 0.0) for t, w in q.items()), d) for v, d in pairs]
            best = sorted((s for s in scores if s[0] > 0), key=lambda s: (-s[0], s[1]))[: max(k, 0)]
            out.append(Hits([d for _, d in best], [s for s, _ in best]))
        return out


TFIDF_PART = IndexPart(name="tfidf", marker="tfidf/meta.json", build=build_tfidf, help="tf-idf vectors")


def tfidf_kind() -> RetrieverKind:
    """The retriever's entry (made once its part is registered: an entry naming an unknown part is refused)."""
    return RetrieverKind(name="tfidf", parts=("tfidf",), open=TfidfIndex, help="TF-IDF cosine (a toy)")


def register() -> None:
    """What $RISE_BATCH_PLUGINS calls in the `rise-batch` process (and in every executor worker)."""
    PARTS.add(TFIDF_PART)
    RETRIEVERS.add(tfidf_kind())


def register_without_docids() -> None:
    """A part that breaks the one rule every index follows: it writes no docids.json."""
    PARTS.add(IndexPart(name="nodocids", marker="n/meta.json", build=lambda job: "index nodocids", help="broken"))
    RETRIEVERS.add(RetrieverKind(name="nodocids", parts=("nodocids",), open=TfidfIndex, help="broken"))


def test_without_the_plugin_the_name_is_unknown_and_a_bad_plugin_is_one_line(tmp_path, sample_path):
    p = cli("index", "--corpus", sample_path, "--out", tmp_path / "i", "--retriever", "tfidf")
    assert p.returncode == 2 and "invalid choice: 'tfidf'" in p.stderr
    p = cli("index", "--help", env={"RISE_BATCH_PLUGINS": "no_such_module_here"})
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert "RISE_BATCH_PLUGINS: cannot load 'no_such_module_here'" in p.stderr
    p = cli("index", "--help", env=PLUGIN)
    assert p.returncode == 0 and "tfidf (tfidf)" in " ".join(p.stdout.split())


def test_an_index_without_docids_is_refused(tmp_path, sample_path):
    env = {"RISE_BATCH_PLUGINS": f"{__name__}:register_without_docids"}
    p = cli("index", "--corpus", sample_path, "--out", tmp_path / "i", "--retriever", "nodocids", env=env)
    assert p.returncode == 2 and "wrote no docids.json; every index holds one" in p.stderr
    assert not (tmp_path / "i").exists()


def test_the_registry_answers_for_a_registered_part(tmp_path, monkeypatch):
    """parts_present, default_retriever and the done marker read the registry: an index holding only the toy's
    part is found, opened by default and published with the toy's marker last; an entry naming no part is refused."""
    from rise_batch.config import ConfigError
    from rise_batch.index.retriever_kinds import default_retriever, index_marker, parts_present

    monkeypatch.setitem(PARTS, "tfidf", TFIDF_PART)
    monkeypatch.setitem(RETRIEVERS, "tfidf", tfidf_kind())
    (tmp_path / "tfidf").mkdir()
    (tmp_path / "tfidf" / "meta.json").write_text("{}")
    assert parts_present(tmp_path) == ["tfidf"] and default_retriever(tmp_path) == "tfidf"
    assert index_marker(tmp_path) == "tfidf/meta.json"
    (tmp_path / "meta.json").write_text("{}")  # a BM25 part beside it: bm25 first, as registered
    assert default_retriever(tmp_path) == "bm25" and index_marker(tmp_path) == "meta.json"
    with pytest.raises(ConfigError, match="unknown index part 'nope'"):
        RetrieverKind(name="x", parts=("nope",), open=TfidfIndex, help="")


@pytest.mark.slow
def test_a_plugin_retriever_is_built_evaluated_and_searched_by_an_agent(tmp_path):
    from rise_batch.fake_llm import FakeLLMServer
    from rise_batch.index.recall import evaluate_recall
    from rise_batch.queries import read_queries
    from rise_batch.space.manifest import read_manifest
    from tests.agent.helpers import read_trajectories, run_dir, title_query, world, write_queries
    from tests.conftest import sample_rows, write_jsonl

    run = partial(cli, env=PLUGIN, check=True)
    w = world()
    root = run_dir("toy-retriever")
    index = root / "index"
    corpus = write_jsonl(root / "corpus.jsonl", sample_rows(len(w.titles)))
    printed = run("index", "--corpus", corpus, "--out", index, "--retriever", "tfidf").stdout
    assert f"index tfidf docs={len(w.titles)} " in printed and f"out={index}" in printed
    assert sorted(p.relative_to(index).as_posix() for p in index.rglob("*")) == [
        "docids.json", "tfidf", "tfidf/meta.json", "tfidf/weights.json",
    ]  # fmt: skip

    queries = write_queries(root / "q.jsonl", [title_query(d, t) for d, t in list(w.titles.items())[:3]])
    result = root / "recall.json"
    printed = run("eval-retrieval", "--index", index, "--queries", queries, "--k", "1,10", "--out", result).stdout
    assert "retriever=tfidf " in printed  # the index's only parts: the default retriever is the plugin's
    expected = evaluate_recall(TfidfIndex(index), read_queries(queries, ids_optional=True), [1, 10])["summary"]
    assert json.loads(result.read_text())["summary"]["recall"] == expected["recall"]

    out = root / "run"
    with FakeLLMServer() as server:  # the scripted agent searches, greps the title, reads and answers
        argv = ["--queries", queries, "--system", "rise", "--index", index, "--docs", w.docs, "--out", out]
        argv += ["--base-url", server.base_url, "--workers", "0", "--k", "3", "--retriever", "tfidf"]
        run("run", *argv, "--keep-workspaces", "--tpm", "100000000", "--rpm", "1000000")
    assert json.loads((out / "run.json").read_text())["config"]["retriever"] == "tfidf"
    trajectories = read_trajectories(out)
    assert len(trajectories) == 3
    for qid, t in trajectories.items():
        assert t["stop_reason"] == "answered" and t["retriever"] == "tfidf", (qid, t["stop_reason"], t["error"])
        subqueries = next(s for s in t["steps"] if s["tool"] == "search")["arguments"]["queries"]
        ranked = {d for hits in TfidfIndex(index).search(subqueries, 3) for d in hits.docids}
        kept = {a.docid for a in read_manifest(out / "workspaces" / qid)}
        assert set(t["retrieved_docids"]) == kept == ranked, qid
