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


# The same gold in three shapes: BrowseComp-Plus objects (scored on evidence, with decoy gold_docs), plain
# gold_doc_ids, and a TSV with a TREC qrels file (rel 0 lines are not gold). Ids are BCP-like numbers.
EVIDENCE = {"1": ["d2"], "2": ["d1", "d4"], "3": ["d1", "d4"], "4": []}
TEXTS = {"1": "capital of France", "2": "Rhone", "3": "Germany capital", "4": "Switzerland"}


def three_shapes(tmp_path) -> dict[str, list[str]]:
    """eval-retrieval arguments per shape (the --queries file and its gold flags)."""
    bcp = [
        {
            "query_id": q,
            "query": TEXTS[q],
            "answer": "x",
            "gold_docs": [{"docid": "d3", "url": "u"}],  # a decoy: BCP scores retrieval against evidence
            "evidence_docs": [{"docid": d, "text": "..."} for d in EVIDENCE[q]],
        }
        for q in TEXTS
    ]
    write_jsonl(tmp_path / "bcp.jsonl", bcp)
    write_jsonl(
        tmp_path / "ids.jsonl", [{"query_id": q, "query": TEXTS[q], "gold_doc_ids": EVIDENCE[q]} for q in TEXTS]
    )
    (tmp_path / "q.tsv").write_text("".join(f"{q}\t{t}\n" for q, t in TEXTS.items()))
    lines = [f"{q} Q0 {d} 1\n" for q, ds in EVIDENCE.items() for d in ds] + ["4 Q0 d3 0\n", "1 0 d1 0\n"]
    (tmp_path / "qrels.txt").write_text("".join(lines))
    return {
        "bcp": ["--queries", str(tmp_path / "bcp.jsonl"), "--gold", "evidence"],
        "ids": ["--queries", str(tmp_path / "ids.jsonl")],
        "qrels": ["--queries", str(tmp_path / "q.tsv"), "--qrels", str(tmp_path / "qrels.txt")],
        "bcp+qrels": ["--queries", str(tmp_path / "bcp.jsonl"), "--qrels", str(tmp_path / "qrels.txt")],
    }


@pytest.fixture(scope="module")
def tiny_index(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    write_jsonl(root / "c.jsonl", DOCS)
    assert main(["index", "--corpus", str(root / "c.jsonl"), "--out", str(root / "i"), "--workers", "1"]) == 0
    return root / "i"


def test_the_same_gold_in_three_shapes_gives_the_same_recall(tmp_path, tiny_index, capsys):
    results = {}
    for shape, args in three_shapes(tmp_path).items():
        out = tmp_path / f"{shape}.json"
        assert main(["eval-retrieval", "--index", str(tiny_index), *args, "--k", "1,2,1000", "--out", str(out)]) == 0
        results[shape] = json.loads(out.read_text())
    capsys.readouterr()
    for shape, res in results.items():
        assert res["per_query"] == results["ids"]["per_query"], shape
        assert res["summary"]["recall"] == results["ids"]["summary"]["recall"], shape
    s = results["ids"]["summary"]
    assert s["n_queries"] == 3 and s["n_skipped_no_gold"] == 1
    assert {p["query_id"]: p["recall"]["1000"] for p in results["ids"]["per_query"]} == {"1": 1.0, "2": 0.5, "3": 0.5}
    # scored on the decoy gold_docs instead, the same BCP file gives other figures: the choice is real
    assert main(["eval-retrieval", "--index", str(tiny_index), "--queries", str(tmp_path / "bcp.jsonl")]) == 0
    assert "gold=gold documents" in capsys.readouterr().out


def test_no_gold_at_all_is_an_error_not_a_recall_of_zero(tmp_path, tiny_index, capsys):
    shapes = three_shapes(tmp_path)
    for args, gold in [([shapes["qrels"][1]], "gold documents"), ([shapes["ids"][1], "--gold", "evidence"], "")]:
        code = main(["eval-retrieval", "--index", str(tiny_index), "--queries", *args])
        err = capsys.readouterr().err
        assert code == 2, err
        assert err.count("\n") == 1 and "eval-retrieval: error:" in err
        assert (f"no query has {gold}" if gold else "no query has evidence documents") in err
        assert "recall@" not in err


def test_trec_run_file_is_scored_the_same_by_trec_eval(tmp_path, tiny_index, capsys):
    """The --trec-run file and the qrels, read and scored by ir_measures (trec_eval's own code, via
    pytrec_eval), give the recall eval-retrieval printed."""
    import ir_measures  # a test extra: trec_eval's measures over the files as written

    args = three_shapes(tmp_path)["qrels"]
    run_file, out = tmp_path / "run.trec", tmp_path / "r.json"
    cmd = ["eval-retrieval", "--index", str(tiny_index), *args, "--k", "1,2,1000", "--out", str(out)]
    assert main([*cmd, "--trec-run", str(run_file), "--tag", "bm25-test"]) == 0
    assert f"wrote {run_file}" in capsys.readouterr().out
    lines = [line.split(" ") for line in run_file.read_text().splitlines()]
    assert {len(x) for x in lines} == {6} and {x[1] for x in lines} == {"Q0"} and {x[5] for x in lines} == {"bm25-test"}
    assert {x[0] for x in lines} == set(TEXTS)  # every query, gold or not
    for qid in TEXTS:
        ranks = [int(x[3]) for x in lines if x[0] == qid]
        scores = [float(x[4]) for x in lines if x[0] == qid]
        assert ranks == list(range(1, len(ranks) + 1)) and scores == sorted(scores, reverse=True)
    qrels = list(ir_measures.read_trec_qrels(str(tmp_path / "qrels.txt")))
    run = list(ir_measures.read_trec_run(str(run_file)))
    theirs = {
        (str(m.measure), m.query_id): m.value
        for m in ir_measures.iter_calc([ir_measures.R @ 1, ir_measures.R @ 2, ir_measures.R @ 1000], qrels, run)
    }
    ours = json.loads(out.read_text())
    for p in ours["per_query"]:
        for k in ("1", "2", "1000"):
            assert theirs[(f"R@{k}", p["query_id"])] == pytest.approx(p["recall"][k]), (p["query_id"], k)
    # query 4's qrels hold no relevant document: trec_eval scores it 0, eval-retrieval (like BCP) counts it apart
    assert [p["query_id"] for p in ours["per_query"]] == ["1", "2", "3"] and theirs[("R@1000", "4")] == 0.0


def test_trec_run_refuses_ids_that_break_its_columns(tmp_path):
    from rise_batch.eval.export import write_trec_run

    with pytest.raises(ValueError, match="query 'q 1': query id 'q 1' is empty or holds whitespace"):
        write_trec_run(tmp_path / "r", [("q 1", ["d"], [1.0])], "t")
    with pytest.raises(ValueError, match="docid 'a b'"):
        write_trec_run(tmp_path / "r", [("q1", ["a b"], [1.0])], "t")
    with pytest.raises(ValueError, match="appears twice"):
        write_trec_run(tmp_path / "r", [("q1", ["a"], [1.0]), ("q1", ["b"], [1.0])], "t")
    assert not (tmp_path / "r").exists()
