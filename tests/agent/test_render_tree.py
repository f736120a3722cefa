"""A node's docs tree rendered by several spawned processes (agent/inputs.make_tree, an OUT without archives) is
the one `structure` wrote: same files, same bytes; and a name planted in the staging tree is never written
through."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from rise_batch.agent.inputs import make_tree
from rise_batch.cli import main
from rise_batch.corpus.scan import shards_from_json
from tests.conftest import SAMPLE


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("render") / "out"
    assert main(["structure", "--corpus", str(SAMPLE), "--out", str(out), "--backend", "heuristic", "--limit", "24",
                 "--shard-docs", "5", "--workers", "0", "--no-progress"]) == 0  # fmt: skip
    return out


def staging(out: Path, where: Path) -> tuple[Path, list, int]:
    """A staging entry as the node cache fills it: the OUT's checkpoint, stats, docmap and manifest, no corpus/."""
    shutil.copytree(out, where, ignore=shutil.ignore_patterns("corpus"))
    manifest = json.loads((out / "manifest.json").read_text())
    return where, shards_from_json(manifest["shards"]), manifest["config"]["max_doc_chars"]


def test_every_core_renders_the_tree_structure_wrote(out, tmp_path):
    tmp, shards, max_chars = staging(out, tmp_path / "entry")
    assert len(shards) == 5
    assert make_tree(tmp, str(out), shards, max_chars, workers=2)[0] == 24  # two spawned processes, a shard at a time
    assert tree(tmp / "corpus") == tree(out / "corpus") and len(tree(out / "corpus")) == 24


def test_a_planted_link_in_the_staging_tree_is_not_written_through(out, tmp_path):
    tmp, shards, max_chars = staging(out, tmp_path / "entry")
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    first = sorted(tree(out / "corpus"))[0]
    (tmp / "corpus" / first).parent.mkdir(parents=True)
    os.symlink(victim, tmp / "corpus" / first)
    with pytest.raises(OSError):
        make_tree(tmp, str(out), shards, max_chars, workers=1)
    assert victim.read_text() == "mine"


def test_the_docmap_read_once_gives_each_shard_its_own_rows(out):
    """make_tree reads docmap.parquet once and hands each process its shard's rows (a compact copy: pickled, it
    carries those rows only, not the whole map)."""
    import pickle

    from rise_batch.safe_read import read_parquet
    from rise_batch.structuring.shard import docmap_by_shard, shard_relpaths

    slices = docmap_by_shard(out)
    assert sorted(slices) == [0, 1, 2, 3, 4]
    for i, part in slices.items():
        assert shard_relpaths(out, i, part) == shard_relpaths(out, i) and part.num_rows in (4, 5)
    whole = len(pickle.dumps(read_parquet(out / "docmap.parquet", columns=["docid", "relpath"])))
    assert len(pickle.dumps(slices[0])) < whole
