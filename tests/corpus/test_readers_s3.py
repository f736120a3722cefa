"""A corpus in object storage (a real S3 server) reads exactly as the same files on disk: JSONL, JSONL.gz and a
directory of Parquet under a prefix; scan, shards and shard reads alike."""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq

from rise_batch.corpus.readers import CorpusError, iter_docs, list_sources, read_shard
from rise_batch.corpus.scan import scan_corpus
from rise_batch.index.plan import plan_index_shards, read_shard_docs
from rise_batch.storage import location
from tests.conftest import sample_rows


def _upload(tmp_path, s3):
    """The same 40 rows as plain JSONL, gzipped JSONL and two Parquet files, on disk and under one s3 prefix."""
    rows = sample_rows(40)
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    parquet = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(rows[:25]), parquet, row_group_size=7)
    parquet2 = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(rows[25:]), parquet2, row_group_size=7)
    files = {"c.jsonl": data, "c.jsonl.gz": gzip.compress(data), "pq/a.parquet": parquet.getvalue().to_pybytes(),
             "pq/sub/b.parquet": parquet2.getvalue().to_pybytes()}  # fmt: skip
    root = location(s3.uri())
    for name, blob in files.items():
        (root / name).write_bytes(blob)
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(blob)
    return str(root), rows


def _docs(docs):
    return [(d.docid, d.text, d.url, d.title, d.row) for d in docs]


def test_corpus_on_s3_reads_as_on_disk(tmp_path, s3):
    uri, rows = _upload(tmp_path, s3)
    for name in ("c.jsonl", "c.jsonl.gz", "pq"):
        remote, local = f"{uri}/{name}", tmp_path / name
        assert _docs(iter_docs(remote)) == _docs(iter_docs(local)) and len(_docs(iter_docs(remote))) == 40
        a, b = scan_corpus(remote, shard_docs=6), scan_corpus(local, shard_docs=6)
        assert [s.source for s in a.shards][0].startswith(f"{uri}/{name}")  # a URI, not a mangled path
        assert [(s.start, s.stop, s.byte_offset) for s in a.shards] == [(s.start, s.stop, s.byte_offset)
                                                                       for s in b.shards]  # fmt: skip
        assert [_docs(read_shard(s)) for s in a.shards] == [_docs(read_shard(s)) for s in b.shards]
        bad: list = []
        got = [_docs(read_shard_docs(s, "error", bad)) for s in plan_index_shards(remote, 9)]
        assert sum(len(g) for g in got) == 40 and not bad
    assert [str(p).removeprefix(uri) for p in list_sources(f"{uri}/pq")] == ["/pq/a.parquet", "/pq/sub/b.parquet"]


def test_missing_corpus_on_s3_is_named(s3):
    uri = s3.uri() + "/nope.jsonl"
    try:
        list_sources(uri)
    except CorpusError as e:
        assert str(e) == f"{uri}: corpus path does not exist"
    else:
        raise AssertionError("no error")
