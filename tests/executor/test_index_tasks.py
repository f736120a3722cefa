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


def test_spilling_ray_tasks_leave_postings_on_disk_not_in_the_object_store(tmp_path, ray_local):
    """With spill=True each shard's postings are files in the spill directory before the merge asks for them, and
    what the merge reads back is what the shard's tokenizer produced; the index equals the local build's."""
    import numpy as np

    from rise_batch.index.plan import plan_index_shards
    from rise_batch.index.shards import RayShardRunner
    from rise_batch.index.tokenize import TokenizerSettings, tokenize_shard

    write_parquet(tmp_path / "c.parquet", sample_rows(40), row_group_size=10)
    shards = plan_index_shards(tmp_path / "c.parquet", 10)
    settings = TokenizerSettings()
    spill = tmp_path / "spill"
    for i, (summary, fetch) in enumerate(RayShardRunner(spill=True).map(shards, settings, "error", spill)):
        on_disk = sorted(p.name for p in spill.glob(f"shard-{i:06d}.*.npy"))
        assert on_disk == [f"shard-{i:06d}.{f}.npy" for f in ("rows", "terms", "tfs")]
        want_summary, want = tokenize_shard(shards[i], settings)
        assert summary.docids == want_summary.docids and summary.vocab == want_summary.vocab
        got = fetch()
        assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
    local = build_index(tmp_path / "c.parquet", tmp_path / "local", workers=2, shard_docs=10)
    dist = build_index(tmp_path / "c.parquet", tmp_path / "ray", shard_docs=10, runner=RayShardRunner(spill=True))
    assert_same_arrays(tmp_path / "ray", tmp_path / "local")
    assert dist.counts == local.counts and dist.corpus["content_sha256"] == local.corpus["content_sha256"]


def test_the_structure_jobs_index_on_ray_spills_its_postings_under_out(tmp_path, sample_path, ray_local):
    """The index built at the end of a structure job on Ray (`--index`, workers >= 1) keeps its shards' postings in
    files under OUT, not in Ray's shared-memory object store, where they would all sit beside the merge's arrays
    (the 1M pipeline's index stage peaked at twice the standalone build). Watched from outside: a thread lists the
    build's spill directory while the job runs. The index equals a local build of the same corpus."""
    import threading

    from rise_batch.config import load_structure_config
    from rise_batch.structuring.job import run_structure

    out = tmp_path / "o"
    seen: set[str] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.update(p.name for p in out.glob(".index.tmp-*/_spill*/shard-*.rows.npy"))
            done.wait(0.002)

    cfg = load_structure_config(
        None,
        corpus=str(sample_path),
        out=str(out),
        backend="heuristic",
        shard_docs=5,
        workers=2,
        index=True,
        progress=False,
    )
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        stats = run_structure(cfg)
    finally:
        done.set()
        watcher.join()
    n_shards = stats["shards"]
    assert n_shards == 20 and len(seen) == n_shards, sorted(seen)
    local = build_index(sample_path, tmp_path / "local", workers=2, shard_docs=5)
    assert_same_arrays(out / "index", tmp_path / "local")
    assert json.loads((out / "index" / "meta.json").read_text())["counts"] == local.counts
