"""The Ray path runs the same per-shard tokenizer as the local processes and builds the same index."""

from __future__ import annotations

import json

import pytest

from rise_batch.index import build_index, load_index
from tests.conftest import sample_rows, write_parquet
from tests.index.conftest import assert_same_arrays


def test_ray_build_equals_local_build(tmp_path, ray_local):
    from rise_batch.index.shards import RayShardRunner

    write_parquet(tmp_path / "c.parquet", sample_rows(), row_group_size=10)
    local = build_index(tmp_path / "c.parquet", tmp_path / "local", workers=2, shard_docs=10)
    dist = build_index(tmp_path / "c.parquet", tmp_path / "ray", shard_docs=10, runner=RayShardRunner())
    assert dist.build["runner"] == "ray" and dist.build["n_shards"] == 10
    assert_same_arrays(tmp_path / "ray", tmp_path / "local")
    assert dist.counts == local.counts and dist.corpus["content_sha256"] == local.corpus["content_sha256"]
    docids = json.loads((tmp_path / "ray" / "docids.json").read_text())
    assert docids == [r["docid"] for r in sample_rows()]
    hits = load_index(tmp_path / "ray", backend="numpy").search(["albedo reflected sunlight"], 3)[0]
    assert hits.docids[0] == "enwiki-39"


def test_ray_task_errors_name_the_row(tmp_path, ray_local):
    from rise_batch.corpus.readers import CorpusError
    from rise_batch.index.shards import RayShardRunner

    rows = sample_rows(12)
    rows[7]["text"] = ""
    write_parquet(tmp_path / "c.parquet", rows)
    with pytest.raises(CorpusError, match="row 7: empty text"):
        build_index(tmp_path / "c.parquet", tmp_path / "i", shard_docs=5, runner=RayShardRunner())
