"""recall@K on a tiny hand-made case, through the library and through `rise-batch eval-retrieval`."""

from __future__ import annotations

import json

import pytest

from rise_batch.cli import main
from rise_batch.index import Hits
from rise_batch.index.recall import evaluate_recall, recall_at
from rise_batch.queries import Query, read_queries
from tests.conftest import write_jsonl

DOCS = [
    {"docid": "d1", "text": "Lyon is a city in France on the Rhone"},
    {"docid": "d2", "text": "Paris is the capital of France"},
    {"docid": "d3", "text": "The Rhone flows from Switzerland to France"},
    {"docid": "d4", "text": "Berlin is the capital of Germany"},
]
QUERIES = [
    {"query_id": "q1", "query": "capital of France", "gold_doc_ids": ["d2"]},  # d2 ranks first
    {"query_id": "q2", "query": "Rhone", "gold_doc_ids": ["d1", "d4"]},  # d1 found (rank 1 or 2), d4 never
    {"query_id": "q3", "query": "Germany capital", "gold_doc_ids": ["d1"]},  # d1 does not match at all
    {"query_id": "q4", "query": "no gold here", "gold_doc_ids": []},  # counted apart
]


class Fixed:
    """A searcher with fixed rankings, so the arithmetic is checked independently of BM25."""

    def __init__(self, ranked: dict[str, list[str]]) -> None:
        self.ranked = ranked

    def search(self, queries: list[str], k: int) -> list[Hits]:
        return [Hits(self.ranked[q][:k], [1.0] * len(self.ranked[q][:k])) for q in queries]


def test_recall_arithmetic():
    assert recall_at(["a", "b", "c"], ["c", "x"], 2) == 0.0
    assert recall_at(["a", "b", "c"], ["c", "x"], 3) == 0.5
    assert recall_at(["a", "b", "b"], ["b", "b"], 2) == 1.0  # gold ids are a set
    qs = [Query("1", "u", gold_doc_ids=("a",)), Query("2", "v", gold_doc_ids=("a", "b"))]
    res = evaluate_recall(Fixed({"u": ["x", "a"], "v": ["b", "y", "a"]}), qs, [1, 2, 3], batch=1)
    assert res["summary"]["recall"] == {"1": 0.25, "2": 0.75, "3": 1.0}
    assert [p["recall"]["1"] for p in res["per_query"]] == [0.0, 0.5]


def test_eval_retrieval_cli_on_a_real_tiny_index(tmp_path, capsys):
    write_jsonl(tmp_path / "c.jsonl", DOCS)
    write_jsonl(tmp_path / "q.jsonl", QUERIES)
    assert main(["index", "--corpus", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "i"), "--workers", "1"]) == 0
    assert "index docs=4" in capsys.readouterr().out
    out = tmp_path / "r.json"
    args = ["eval-retrieval", "--index", str(tmp_path / "i"), "--queries", str(tmp_path / "q.jsonl")]
    assert main([*args, "--k", "1,2,1000", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    res = json.loads(out.read_text())
    # q1: 1/1/1; q2: d1 in the top 2 but d4 never -> 0 or .5 at k=1, .5 at k=2; q3: 0
    assert res["summary"]["n_queries"] == 3 and res["summary"]["n_skipped_no_gold"] == 1
    per = {p["query_id"]: p["recall"] for p in res["per_query"]}
    assert per["q1"] == {"1": 1.0, "2": 1.0, "1000": 1.0}
    assert per["q2"]["2"] == per["q2"]["1000"] == 0.5
    assert per["q3"] == {"1": 0.0, "2": 0.0, "1000": 0.0}
    assert res["summary"]["recall"]["1000"] == pytest.approx(0.5)
    assert "recall@1000  0.5000" in printed


def test_read_queries_refuses_bad_lines(tmp_path):
    (tmp_path / "q.jsonl").write_text('{"query": "ok", "gold_doc_ids": ["a"]}\n{"gold_doc_ids": []}\n')
    with pytest.raises(ValueError, match="line 2"):
        read_queries(tmp_path / "q.jsonl", ids_optional=True)
    (tmp_path / "q.jsonl").write_text('{"query": "ok", "gold_doc_ids": ["a"]}\n\n')
    assert read_queries(tmp_path / "q.jsonl", ids_optional=True) == [Query("1", "ok", (), ("a",))]
