from __future__ import annotations

import pytest

from rise_batch.corpus.readers import CorpusError, RawRow, iter_docs, list_sources, read_shard
from rise_batch.corpus.scan import scan_corpus
from tests.conftest import sample_rows, write_jsonl, write_parquet

ROWS = [
    {"docid": f"d{i}", "text": f"---\ntitle: T{i}\n---\nbody {i}\n", "url": f"https://ex.org/{i}"} for i in range(7)
]


@pytest.mark.parametrize("fmt", ["jsonl", "jsonl.gz", "parquet", "parquet-dir"])
def test_every_format_reads_the_same_docs(tmp_path, fmt):
    if fmt == "parquet-dir":
        (tmp_path / "c").mkdir()
        write_parquet(tmp_path / "c" / "a.parquet", ROWS[:3])
        write_parquet(tmp_path / "c" / "b.parquet", ROWS[3:])
        path = tmp_path / "c"
    elif fmt == "parquet":
        path = write_parquet(tmp_path / "c.parquet", ROWS, row_group_size=2)
    else:
        path = write_jsonl(tmp_path / f"c.{fmt}", ROWS, gz=fmt.endswith("gz"))
    docs = list(iter_docs(path))
    assert [d.docid for d in docs] == [r["docid"] for r in ROWS]
    assert [d.text for d in docs] == [r["text"] for r in ROWS]
    assert docs[2].url == "https://ex.org/2"


def test_sample_corpus_streams(sample_path):
    docs = list(iter_docs(sample_path))
    assert len(docs) == 100 and len({d.docid for d in docs}) == 100
    assert all(d.text.startswith("---\n") for d in docs)


@pytest.mark.parametrize(
    "rows, reason",
    [
        (ROWS[:2] + [{"docid": "d0", "text": "again"}], "duplicate docid"),
        (ROWS[:2] + [{"docid": 5, "text": "x"}], "non-string docid"),
        (ROWS[:2] + [{"docid": "n", "text": None}], "null text"),
        (ROWS[:2] + [{"docid": "e", "text": "   "}], "empty text"),
        (ROWS[:2] + [{"docid": None, "text": "x"}], "null docid"),
    ],
)
def test_bad_rows_error_names_file_and_row(tmp_path, rows, reason):
    path = write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(CorpusError, match=rf"bad\.jsonl: row 2: {reason}"):
        list(iter_docs(path))
    with pytest.raises(CorpusError, match=rf"row 2: {reason}"):
        scan_corpus(path)
    plan = scan_corpus(path, on_bad_row="skip")
    assert plan.n_docs == 2 and plan.n_rows == 3
    assert [(b.row, reason in b.reason) for b in plan.bad_rows] == [(2, True)]


def test_undecodable_bytes_and_broken_json_are_reported(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"docid": "a", "text": "ok"}\n{"docid": "b", "text": "\xff\xfe"}\n{not json\n')
    with pytest.raises(CorpusError, match=r"row 1: undecodable bytes"):
        list(iter_docs(path))
    plan = scan_corpus(path, on_bad_row="skip")
    assert plan.n_docs == 1
    assert [b.row for b in plan.bad_rows] == [1, 2]
    assert "invalid JSON" in plan.bad_rows[1].reason


def test_undecodable_parquet_binary_text(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"docid": ["a", "b"], "text": pa.array([b"fine", b"\xff bad"], pa.binary())})
    pq.write_table(table, tmp_path / "c.parquet")
    with pytest.raises(CorpusError, match=r"c\.parquet: row 1: undecodable text bytes"):
        list(iter_docs(tmp_path / "c.parquet"))


def test_missing_column_and_bad_paths(tmp_path):
    write_parquet(tmp_path / "c.parquet", [{"id": "a", "body": "x"}])
    with pytest.raises(CorpusError, match=r"c\.parquet: no docid column; the rows have \[id, body\]"):
        list(iter_docs(tmp_path / "c.parquet"))
    with pytest.raises(CorpusError, match="does not exist"):
        list_sources(tmp_path / "nope")
    (tmp_path / "x.notacorpus").write_text("a,b")
    with pytest.raises(CorpusError, match="unsupported corpus format"):
        list_sources(tmp_path / "x.notacorpus")


@pytest.mark.parametrize("fmt", ["jsonl", "jsonl.gz", "parquet"])
def test_shards_partition_the_corpus(tmp_path, fmt):
    rows = sample_rows(23) + [{"docid": "enwiki-12", "text": "dup"}] + [{"docid": "z", "text": "last"}]
    if fmt == "parquet":
        path = write_parquet(tmp_path / "c.parquet", rows, row_group_size=4)
    else:
        path = write_jsonl(tmp_path / f"c.{fmt}", rows, gz=fmt.endswith("gz"))
    plan = scan_corpus(path, shard_docs=5, on_bad_row="skip")
    assert len(plan.shards) == 5
    got = [d.docid for s in plan.shards for d in read_shard(s)]
    assert got == [r["docid"] for r in rows[:23]] + ["z"]
    assert plan.bad_rows[0].row == 23 and "duplicate" in plan.bad_rows[0].reason


def test_limit_stops_after_n_valid_docs(sample_path):
    plan = scan_corpus(sample_path, shard_docs=4, limit=10)
    assert plan.n_docs == 10
    assert sum(1 for s in plan.shards for _ in read_shard(s)) == 10


def _tsv_rows(src, start=0, stop=None, byte_offset=0, columns=None):
    """A minimal reader for the registry test: `docid<TAB>text` per line."""
    with open(src, encoding="utf-8") as fh:
        for row, line in enumerate(fh):
            if stop is not None and row >= stop:
                return
            if row >= start:
                docid, text = line.rstrip("\n").split("\t", 1)
                yield RawRow(row, {"docid": docid, "text": text.replace("\\n", "\n")})


def test_a_new_format_is_one_reader_and_one_registry_line(tmp_path, monkeypatch):
    """Scan, shards, the index plan and plan sampling all follow the registry (tests/test_extension_points.py: help,
    errors and the guides' list too)."""
    from rise_batch.corpus import readers
    from rise_batch.index.plan import plan_index_shards
    from rise_batch.structuring.plan import sample_docs

    tsv = readers.CorpusFormat(name="tsv", label="TSV", suffixes=(".tsv",), read_rows=_tsv_rows)
    monkeypatch.setitem(readers.FORMATS, "tsv", tsv)
    (tmp_path / "c").mkdir()
    lines = [r["docid"] + "\t" + r["text"].replace("\n", "\\n") + "\n" for r in ROWS]
    (tmp_path / "c" / "a.tsv").write_text("".join(lines))
    write_jsonl(tmp_path / "c" / "b.jsonl", [{"docid": "j1", "text": "jsonl body"}])
    assert [p.name for p in list_sources(tmp_path / "c")] == ["a.tsv", "b.jsonl"]
    docs = list(iter_docs(tmp_path / "c"))
    assert [d.text for d in docs[:7]] == [r["text"] for r in ROWS] and docs[7].docid == "j1"
    plan = scan_corpus(tmp_path / "c", shard_docs=3)
    assert [d.docid for s in plan.shards for d in read_shard(s)] == [d.docid for d in docs]
    assert [s.source.endswith("a.tsv") for s in plan_index_shards(tmp_path / "c", 3)] == [True, False]
    assert readers.count_rows(tmp_path / "c" / "a.tsv") == 7
    sampled, total = sample_docs(tmp_path / "c", 100)
    assert total == 8 and [d.docid for d in sampled] == [d.docid for d in docs]
