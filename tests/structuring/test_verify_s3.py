"""A checkpoint in object storage (a real S3 server, SeaweedFS) is checked as one on disk: its parts listed once
for every shard and the shards checked several at a time, the same damage is refused, the first damaged shard named
first, and `verify_outputs` still misses no marker."""

from __future__ import annotations

import pytest

from rise_batch.agent.inputs import local_docs
from rise_batch.cli import main
from rise_batch.corpus.scan import shards_from_json
from rise_batch.io import read_json
from rise_batch.storage import location
from rise_batch.structuring.checkpoint import CheckpointError, CheckpointStore
from rise_batch.structuring.verify import require_intact, verify_checkpoint, verify_outputs
from tests.conftest import SAMPLE

FLAGS = ["--backend", "heuristic", "--limit", "24", "--shard-docs", "5", "--workers", "0", "--no-progress"]


def structured(root) -> object:
    (root / "corpus.jsonl.gz").write_bytes(SAMPLE.read_bytes())
    assert main(["structure", "--corpus", str(root / "corpus.jsonl.gz"), "--out", str(root / "out"), *FLAGS]) == 0
    return root / "out"


@pytest.fixture
def out(s3):
    """A fresh structure OUT in the bucket (5 shards, 24 documents)."""
    return structured(location(s3.uri()))


def shards(out) -> list:
    return shards_from_json(read_json(out / "manifest.json")["shards"])


@pytest.mark.parametrize("where", ["s3", "posix"])
def test_parts_by_shard_is_each_shards_own_listing(where, request, tmp_path):
    out = structured(location(request.getfixturevalue("s3").uri()) if where == "s3" else tmp_path)
    store = CheckpointStore(out)
    # names the per-shard pattern takes or leaves: another width, a non-numeric part, not a part at all
    for name in ("shard-12.part-000000.parquet", "shard-000001.part-x.parquet", "shard-000002.parts.parquet",
                 "shard-0000003.part-000000.parquet", "notes.txt"):  # fmt: skip
        (store.parts_dir / name).write_bytes(b"x")
    groups = store.parts_by_shard()
    assert {sid: store.parts(sid) for sid in range(13) if store.parts(sid)} == groups
    assert [p.name for p in groups[1]][1:] == ["shard-000001.part-x.parquet"] and 12 not in groups


def test_an_intact_checkpoint_in_object_storage_passes(out, tmp_path):
    v = verify_checkpoint(out, shards(out))
    assert v.damaged == [] and not v.rebought_replies
    assert verify_outputs(out, shards(out), {s.shard_id for s in shards(out)}) == []
    assert local_docs(str(out), tmp_path / "cache").path.is_dir()


@pytest.mark.parametrize("how", ["empty marker", "part deleted", "part truncated"])
def test_damage_in_object_storage_is_refused_naming_the_first_damaged_shard(out, tmp_path, how):
    store = CheckpointStore(out)
    for sid in (1, 4):
        (part,) = store.parts(sid)
        if how == "empty marker":
            store.stats_path(sid).write_bytes(b"")
        elif how == "part deleted":
            part.unlink()
        else:
            part.write_bytes(part.read_bytes()[:100])
    named = store.stats_path(1) if how == "empty marker" else store.parts(1)[0] if how != "part deleted" else None
    with pytest.raises(CheckpointError) as e:
        require_intact(out, shards(out))
    first = str(e.value).split(":")[0:2]
    assert "shard-000001" in str(e.value).split(";")[0] and "(and 1 more damaged files)" in str(e.value)
    assert named is None or str(named) == ":".join(first)
    with pytest.raises(CheckpointError, match="shard-000001"):  # the worker's copy refuses it too
        local_docs(str(out), tmp_path / "cache")
    assert [d.shard_id for d in verify_checkpoint(out, shards(out)).damaged] == [1, 4]


def test_verify_outputs_in_object_storage_names_a_missing_marker(out):
    store = CheckpointStore(out)
    store.stats_path(3).unlink()
    (part,) = store.parts(0)
    data = part.read_bytes()
    i = len(data) // 2
    part.write_bytes(data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1 :])  # the same size: only the digest tells
    got = verify_outputs(out, shards(out), fresh={0})
    assert [(d.shard_id, d.reason) for d in got] == [
        (0, "its digest differs from the done marker's"),
        (3, "missing: its worker reported the shard done"),
    ]
