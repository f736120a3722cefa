"""A node's docs tree from a structure OUT in object storage (a real S3 server, SeaweedFS) unpacked from the shards'
archives (structuring/archive.py): the same bytes as the tree a POSIX run writes; an archive missing, cut short,
or with other bytes than its done marker records is never used (the shard is rendered instead, and said); an OUT
written before archives is rendered as before; a node killed mid-unpack leaves nothing that is used."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rise_batch.agent.inputs import local_docs, make_tree
from rise_batch.agent.originals import original_docs
from rise_batch.agent.views import TOC, VIEWS, view_docs
from rise_batch.cli import main
from rise_batch.corpus.scan import shards_from_json
from rise_batch.storage import location
from rise_batch.structuring.archive import archive_path
from tests.agent.test_render_tree import tree
from tests.conftest import SAMPLE

FLAGS = ["--backend", "heuristic", "--limit", "24", "--shard-docs", "5", "--workers", "0", "--no-progress"]


@pytest.fixture(scope="module")
def ref(tmp_path_factory) -> dict[str, bytes]:
    """The tree a POSIX run writes: OUT/corpus/, byte for byte."""
    out = tmp_path_factory.mktemp("posix") / "out"
    assert main(["structure", "--corpus", str(SAMPLE), "--out", str(out), *FLAGS]) == 0
    return tree(out / "corpus")


@pytest.fixture
def out(s3):
    """A fresh structure OUT in the bucket (5 shards, 24 documents)."""
    root = location(s3.uri())
    (root / "corpus.jsonl.gz").write_bytes(SAMPLE.read_bytes())
    assert main(["structure", "--corpus", str(root / "corpus.jsonl.gz"), "--out", str(root / "out"), *FLAGS]) == 0
    return root / "out"


def markers(out) -> dict[int, dict]:
    return {i: json.loads((out / "stats" / f"shard-{i:06d}.json").read_text()) for i in range(5)}


def test_the_tree_unpacked_from_archives_is_the_posix_runs(out, ref, tmp_path, caplog):
    records = {i: m["archive"] for i, m in markers(out).items()}
    assert sum(r["docs"] for r in records.values()) == 24
    assert all(archive_path(out, i).stat().st_size == r["bytes"] for i, r in records.items())
    with caplog.at_level(logging.WARNING):
        got = local_docs(str(out), tmp_path / "cache")
    assert tree(got.path / "corpus") == ref and len(ref) == 24
    assert not got.reused and "rendered from the checkpoint" not in caplog.text
    # the archives replace the corpus: the bytes read are the copied objects and the archives, no corpus file
    copied = sum(n for sub in ("checkpoint", "stats") for _, n in (out / sub).list())
    copied += sum((out / name).stat().st_size for name in ("docmap.parquet", "manifest.json"))
    assert got.bytes == copied + sum(r["bytes"] for r in records.values())
    again = local_docs(str(out), tmp_path / "cache")  # a checked copy is reused
    assert again.reused and again.path == got.path and again.bytes == 0
    # the original-text twin derives from the unpacked tree, each original checked against its content hash
    twin = original_docs(got.path, workers=1)
    assert twin == got.path / "original" and len(tree(twin / "corpus")) == 24
    toc = view_docs(VIEWS[TOC], got.path, workers=1)  # and so does every other view (TOC-only files)
    assert toc == got.path / "toc" and len(tree(toc / "corpus")) == 24


def damage(path, how: str) -> None:
    data = path.read_bytes()
    if how == "missing":
        path.unlink()
    elif how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "grown":  # a crafted object far larger than its record: refused on its size
        path.write_bytes(data + bytes(64 << 20))
    else:  # the same size, one byte changed: only the digest tells
        i = len(data) // 2
        path.write_bytes(data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1 :])


@pytest.mark.parametrize("how", ["missing", "truncated", "grown", "flipped"])
def test_a_damaged_archive_is_never_used_the_shard_is_rendered_and_said(out, ref, tmp_path, caplog, how):
    damage(archive_path(out, 2), how)
    manifest = json.loads((out / "manifest.json").read_text())
    tmp, shards, max_chars = staging_from(out, tmp_path / "entry", manifest)
    with caplog.at_level(logging.WARNING):
        n, _ = make_tree(tmp, str(out), shards, max_chars, workers=1)
    assert n == 24 and tree(tmp / "corpus") == ref
    (line,) = [r.getMessage() for r in caplog.records if "rendered from the checkpoint" in r.getMessage()]
    assert "shard 2 " in line and "shard-000002.parquet" in line


def test_an_archive_of_other_texts_is_refused_even_when_readable(out, ref, tmp_path, caplog):
    """Shard 1's archive replaced by shard 0's (a readable archive, another shard's files): its digest differs
    from the marker's record, so it is not unpacked."""
    archive_path(out, 1).write_bytes(archive_path(out, 0).read_bytes())
    with caplog.at_level(logging.WARNING):
        got = local_docs(str(out), tmp_path / "cache")
    assert tree(got.path / "corpus") == ref
    assert "shard 1 rendered" in caplog.text


def test_an_out_written_before_archives_is_rendered(out, ref, tmp_path, caplog):
    for i, m in markers(out).items():  # as an older `structure` wrote them: no "archive", no archive object
        del m["archive"]
        (out / "stats" / f"shard-{i:06d}.json").write_text(json.dumps(m, sort_keys=True))
        archive_path(out, i).unlink()
    with caplog.at_level(logging.WARNING):
        got = local_docs(str(out), tmp_path / "cache")
    assert tree(got.path / "corpus") == ref and "rendered from the checkpoint" not in caplog.text


KILL_AFTER_ONE_SHARD = """
import os, signal, sys
from pathlib import Path
import rise_batch.agent.inputs as inputs
real = inputs.write_docs
def write_then_die(dest, docs, fresh=False):
    n = real(dest, docs, fresh)
    os.kill(os.getpid(), signal.SIGKILL)  # the node dies with one shard unpacked
inputs.write_docs = write_then_die
inputs.node_cpus = lambda: 1  # inline: the kill takes the node's only process
inputs.local_docs(sys.argv[1], Path(sys.argv[2]))
"""


def test_a_node_killed_mid_unpack_leaves_nothing_used(out, ref, tmp_path):
    cache = tmp_path / "cache"
    r = subprocess.run([sys.executable, "-c", KILL_AFTER_ONE_SHARD, str(out), str(cache)], env=os.environ)
    assert r.returncode == -9
    (left,) = [p for p in (cache / "docs").iterdir() if ".staging-" in p.name]
    assert 0 < len(tree(left / "corpus")) < 24  # a partial tree, never renamed into place
    assert not [p for p in (cache / "docs").iterdir() if not p.name.startswith(".")]
    got = local_docs(str(out), cache)
    assert not got.reused and tree(got.path / "corpus") == ref
    assert not left.exists()  # the killed copy's staging was removed, not used


def staging_from(out, where: Path, manifest: dict) -> tuple[Path, list, int]:
    """A staging entry as the node cache fills it from the bucket: checkpoint, stats, docmap, manifest."""
    where.mkdir()
    for sub in ("checkpoint", "stats"):
        (where / sub).mkdir()
        for p, _ in (out / sub).list():
            (where / sub / p.name).write_bytes(p.read_bytes())
    for name in ("docmap.parquet", "manifest.json"):
        (where / name).write_bytes((out / name).read_bytes())
    return where, shards_from_json(manifest["shards"]), manifest["config"]["max_doc_chars"]
