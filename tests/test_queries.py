"""Query files in the shapes users bring: BrowseComp-Plus decrypted JSONL, SQuAD-style answers lists, TSV."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from rise_batch.queries import Query, QueryFileError, answers_by_id, read_qrels, read_queries, select_gold
from tests.conftest import shared_data


def write(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_browsecomp_plus_style_rows_with_gold_doc_objects(tmp_path: Path) -> None:
    row = {
        "query_id": 769,
        "query": "Which painter ...?",
        "answer": "Jan Steen",
        "evidence_docs": [{"docid": "1", "text": "..."}],
        "gold_docs": [{"docid": "17", "url": "u", "text": "..."}, {"docid": "4"}, {"docid": "17"}],
        "negative_docs": [{"docid": "9"}],
    }
    [q] = read_queries(write(tmp_path / "bcp.jsonl", [row, ""]))
    assert q == Query("769", "Which painter ...?", ("Jan Steen",), ("17", "4"), ("1",))
    assert q.answer == "Jan Steen"


def test_squad_style_answers_lists_and_plain_gold_ids(tmp_path: Path) -> None:
    rows = [
        {"query_id": "a", "query": "q1", "answers": ["nine", "nine", " ", "9"], "gold_doc_ids": [48139]},
        {"id": "b", "question": "q2", "answers": [{"text": "x", "answer_start": 3}]},
        {"query_id": "c", "query": "q3"},
    ]
    path = tmp_path / "sq.jsonl.gz"
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    qs = read_queries(path)
    assert qs[0] == Query("a", "q1", ("nine", "9"), ("48139",))
    assert qs[1] == Query("b", "q2", ("x",), ())
    assert qs[2].answer is None and qs[2].gold_doc_ids == ()
    assert answers_by_id(path) == {"a": ("nine", "9"), "b": ("x",)}
    assert answers_by_id(None) == {} and answers_by_id(tmp_path / "missing.jsonl") == {}
    assert [q.query_id for q in read_queries(path, limit=2)] == ["a", "b"]


def test_tsv_queries(tmp_path: Path) -> None:
    path = tmp_path / "queries.tsv"
    path.write_text("1\tWho wrote it?\n2\tWhen?\n")
    assert read_queries(path) == [Query("1", "Who wrote it?"), Query("2", "When?")]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (["{not json"], "line 1: invalid JSON"),
        ([{"query_id": "a"}], "line 1: missing string field 'query'"),
        ([{"query": "q"}], "missing 'query_id'"),
        ([{"query_id": "a", "query": "q"}, {"query_id": "a", "query": "r"}], "duplicate query_id 'a'"),
        ([{"query_id": "a", "query": "q", "gold_doc_ids": "d1"}], "gold documents must be a list"),
        ([{"query_id": "a", "query": "q", "gold_docs": [{"url": "u"}]}], "a gold document has no docid"),
        ([{"query_id": "a", "query": "q", "answers": [["x"]]}], "'answers' must be a string or a list"),
    ],
)
def test_bad_rows_name_file_and_line(tmp_path: Path, rows: list, message: str) -> None:
    with pytest.raises(QueryFileError, match=message):
        read_queries(write(tmp_path / "q.jsonl", rows))


def test_the_shared_squad_queries() -> None:
    qs = read_queries(shared_data("squad_wiki/queries.jsonl"))
    assert len(qs) > 4000 and all(q.answers and q.gold_doc_ids for q in qs)
    assert len({q.query_id for q in qs}) == len(qs)


def _old_recall_reader(path: Path) -> list[dict]:
    """index/recall.py's reader before the two readers became one, verbatim: the reference for ids_optional."""
    rows = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            r = json.loads(line)
            if not isinstance(r.get("query"), str):
                raise ValueError(f"{path}: line {n}: missing string field 'query'")
            gold = r.get("gold_doc_ids", [])
            if not isinstance(gold, list):
                raise ValueError(f"{path}: line {n}: 'gold_doc_ids' must be a list")
            rows.append({"query_id": str(r.get("query_id", n)), "query": r["query"], "gold": [str(g) for g in gold]})
    return rows


def test_ids_optional_reads_what_eval_retrieval_always_read(tmp_path: Path) -> None:
    rows = [
        {"query_id": "q1", "query": "capital of France", "gold_doc_ids": ["d2", "d2", 7]},
        {"query": "no id: numbered by its line", "gold_doc_ids": []},
        "",
        {"id": "x", "query": "the id alias is not read", "gold_doc_ids": ["d1"], "answers": [["not", "read"]]},
        {"query_id": "q1", "query": "duplicate ids are labels", "gold_doc_ids": [None, {"url": "u"}]},
        {"query_id": None, "query": "   ", "gold_doc_ids": ["d3"]},
    ]
    path = write(tmp_path / "r.jsonl", rows)
    new = read_queries(path, ids_optional=True)
    old = _old_recall_reader(path)
    assert [(q.query_id, q.query, set(q.gold_doc_ids)) for q in new] == [
        (r["query_id"], r["query"], set(r["gold"])) for r in old
    ]
    assert [q.query_id for q in new] == ["q1", "2", "4", "q1", "None"]
    assert all(q.answers == () for q in new)


def test_ids_optional_also_reads_bcp_gold_docs_tsv_and_gzip(tmp_path: Path) -> None:
    row = {"query_id": 7, "question": "q", "gold_docs": [{"docid": "17"}, {"docid": 4}]}
    bcp = write(tmp_path / "bcp.jsonl", [row])
    assert read_queries(bcp, ids_optional=True) == [Query("7", "q", (), ("17", "4"))]
    tsv = tmp_path / "q.tsv.gz"
    tsv.write_bytes(gzip.compress(b"1\tWho?\n"))
    assert read_queries(tsv, ids_optional=True) == [Query("1", "Who?")]


BCP_ROWS = [  # the decrypted BrowseComp-Plus shape: gold and evidence as objects with a docid (invented values)
    {
        "query_id": "1",
        "query": "q one",
        "answer": "a",
        "gold_docs": [{"docid": "10"}],
        "evidence_docs": [{"docid": "10", "text": "..."}, {"docid": "11", "text": "..."}],
    },
    {"query_id": "2", "query": "q two", "answer": "b", "gold_docs": [{"docid": "20"}], "evidence_docs": []},
]


def test_gold_or_evidence_is_one_choice(tmp_path: Path) -> None:
    path = write(tmp_path / "bcp.jsonl", BCP_ROWS)
    qs = read_queries(path)
    assert [q.gold_doc_ids for q in select_gold(qs)] == [("10",), ("20",)]
    assert [q.gold_doc_ids for q in select_gold(qs, "evidence")] == [("10", "11"), ()]
    plain = write(tmp_path / "plain.jsonl", [{"query_id": "1", "query": "q", "evidence_doc_ids": [10, 11]}])
    assert select_gold(read_queries(plain), "evidence")[0].gold_doc_ids == ("10", "11")
    no_evidence = write(tmp_path / "sq.jsonl", [{"query_id": "1", "query": "q", "gold_doc_ids": ["10"]}])
    with pytest.raises(QueryFileError, match=r"sq.jsonl: no query has evidence documents .*--gold gold"):
        select_gold(read_queries(no_evidence), "evidence", source=no_evidence)
    with pytest.raises(QueryFileError, match="gold must be one of gold, evidence"):
        select_gold(qs, "golds")


def test_trec_qrels_replace_the_files_gold(tmp_path: Path) -> None:
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("1 Q0 10 1\n1 Q0 12 0\n\n1 0 11 2\n2\t0\t20\t1\n1 Q0 10 1\n3 0 30 0\n")
    assert read_qrels(qrels) == {"1": ("10", "11"), "2": ("20",)}  # rel 0 is not relevant; 3 has none
    qs = read_queries(write(tmp_path / "q.jsonl", BCP_ROWS))
    assert [q.gold_doc_ids for q in select_gold(qs, "gold", qrels)] == [("10", "11"), ("20",)]
    other = tmp_path / "other.txt"
    other.write_text("x 0 10 1\n")
    with pytest.raises(QueryFileError, match=r"other.txt: names none of the 2 query ids .*first qrels id 'x'"):
        select_gold(qs, "gold", other)
    for text, message in [
        ("1 0 10\n", "line 1: expected 4 columns"),
        ("1 0 10 1\n1 0 11 yes\n", "line 2: relevance 'yes' is not an integer"),
        ("1 0 10 0\n", "no relevant document"),
    ]:
        qrels.write_text(text)
        with pytest.raises(QueryFileError, match=message):
            read_qrels(qrels)


def test_a_json_list_of_rows(tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    path.write_text(json.dumps([{"id": "a", "question": "q1", "answers": ["x"], "gold_doc_ids": [1]}, BCP_ROWS[0]]))
    assert read_queries(path) == [Query("a", "q1", ("x",), ("1",)), Query("1", "q one", ("a",), ("10",), ("10", "11"))]
    assert read_queries(path, limit=1) == read_queries(path)[:1]
    path.write_text(json.dumps({"data": []}))
    with pytest.raises(QueryFileError, match="must hold one list of rows"):
        read_queries(path)
    path.write_text(json.dumps([{"id": "a"}]))
    with pytest.raises(QueryFileError, match="q.json: row 1: missing string field 'query'"):
        read_queries(path)


def test_deeply_nested_json_is_a_one_line_error(tmp_path: Path) -> None:
    """A RecursionError traceback (exit 1) before."""
    (tmp_path / "deep.json").write_text("[" * 100_000)
    (tmp_path / "deep.jsonl").write_text('{"query_id": "q", "query": ' + "[" * 100_000 + "}\n")
    with pytest.raises(QueryFileError, match=r"deep\.json: JSON nested too deeply$"):
        read_queries(tmp_path / "deep.json")
    with pytest.raises(QueryFileError, match=r"deep\.jsonl: line 1: JSON nested too deeply$"):
        read_queries(tmp_path / "deep.jsonl")


def test_a_tsv_line_with_an_empty_id_is_refused(tmp_path: Path) -> None:
    (tmp_path / "q.tsv").write_text("q1\tfirst\n \tsecond\n")
    with pytest.raises(QueryFileError, match=r"q\.tsv: line 2: expected `query_id<TAB>query`"):
        read_queries(tmp_path / "q.tsv")


def test_ids_that_would_share_a_file_name_are_refused(tmp_path: Path) -> None:
    """`a/b` is written as a_b-c14cddc0.json, the safe name of the id `a_b-c14cddc0` too: one file for two."""
    path = tmp_path / "q.jsonl"
    path.write_text('{"query_id": "a/b", "query": "x"}\n{"query_id": "a_b-c14cddc0", "query": "y"}\n')
    with pytest.raises(QueryFileError, match=r"'a/b' and 'a_b-c14cddc0' would share the file name a_b-c14cddc0\.json"):
        read_queries(path)
    assert len(read_queries(path, ids_optional=True)) == 2  # eval-retrieval writes no file per query
    path.write_text('{"query_id": "a", "query": "x"}\n{"query_id": "a", "query": "y"}\n')
    with pytest.raises(QueryFileError, match="duplicate query_id 'a'"):
        read_queries(path)


def test_a_qrels_or_query_path_that_is_not_a_regular_file_is_refused_at_once(tmp_path: Path) -> None:
    """A directory was a traceback, a FIFO hung the reader for good (the limit only catches a hang)."""
    import os
    import threading

    queries = [Query("q1", "x")]
    (tmp_path / "qrels.d").mkdir()
    os.mkfifo(tmp_path / "qrels.fifo")
    os.mkfifo(tmp_path / "q.jsonl")
    errors: list[str] = []

    def attempt() -> None:
        for call in (
            lambda: select_gold(queries, qrels=tmp_path / "qrels.d"),
            lambda: select_gold(queries, qrels=tmp_path / "qrels.fifo"),
            lambda: read_queries(tmp_path / "q.jsonl"),
        ):
            try:
                call()
            except QueryFileError as e:
                errors.append(str(e))

    reader = threading.Thread(target=attempt, daemon=True)
    reader.start()
    reader.join(60)
    if reader.is_alive():
        with open(tmp_path / "qrels.fifo", "w"), open(tmp_path / "q.jsonl", "w"):  # unblock the hung reader
            pass
        pytest.fail("reading a FIFO hung")
    assert errors == [
        f"qrels file {tmp_path / 'qrels.d'} is a directory, not a regular file: give the file itself",
        f"qrels file {tmp_path / 'qrels.fifo'} is a FIFO, not a regular file: give the file itself",
        f"query file {tmp_path / 'q.jsonl'} is a FIFO, not a regular file: give the file itself",
    ]
