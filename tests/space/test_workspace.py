"""Workspace: hardlinked union that only grows, paths preserved, manifest of arrivals, copy fallback, cleanup."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

import pytest

from rise_batch.space import workspace
from rise_batch.space.docstore import DocStore, load_docmap
from rise_batch.space.manifest import MANIFEST
from rise_batch.space.workspace import Workspace


def test_docstore_reads_docmap_both_ways(docs):
    root, relpaths = docs
    store = DocStore(root)
    assert dict(store.relpath) == relpaths == load_docmap(root)
    docid, rel = next(iter(relpaths.items()))
    assert store.docid(rel) == docid and store.path(docid) == root / "corpus" / rel
    assert store.path("no-such-doc") is None and len(store) == len(relpaths)


def test_docstore_without_corpus_dir_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="corpus/"):
        DocStore(tmp_path)


def test_add_hardlinks_under_the_same_relpath(docs, tmp_path):
    root, relpaths = docs
    ws = Workspace(tmp_path / "ws", DocStore(root))
    ids = list(relpaths)[:5]
    res = ws.add(ids)
    assert res.new == ids and res.present == 0 and res.missing == []
    for d in ids:
        f = ws.files_dir / relpaths[d]
        src = root / "corpus" / relpaths[d]
        assert f.read_bytes() == src.read_bytes()
        assert os.stat(f).st_ino == os.stat(src).st_ino  # a hardlink, not a copy
    assert ws.copied == 0
    assert sorted(p.relative_to(ws.files_dir).as_posix() for p in ws.files_dir.rglob("*.txt")) == sorted(
        relpaths[d] for d in ids
    )


def test_union_is_monotonic_and_records_arrivals(docs, tmp_path):
    root, relpaths = docs
    ids = list(relpaths)
    ws = Workspace(tmp_path / "ws", DocStore(root))
    first = ws.add(ids[:6])
    second = ws.add(ids[3:10])  # overlaps the first call on ids[3:6]
    assert first.new == ids[:6]
    assert second.new == ids[6:10] and second.present == 3
    assert len(ws) == 10 and set(ws.docids()) == set(ids[:10])
    assert ws.docids() == ids[:10]  # arrival order
    assert [ws.arrivals[d].call for d in ids[:10]] == [0] * 6 + [1] * 4
    assert [ws.arrivals[d].seq for d in ids[:10]] == list(range(10))
    third = ws.add(ids[:2])
    assert third.new == [] and third.present == 2 and len(ws) == 10  # nothing removed, nothing duplicated
    for d in ids[:10]:
        assert (ws.files_dir / relpaths[d]).exists()


def test_missing_docids_are_reported_not_fatal(docs, tmp_path):
    root, relpaths = docs
    first = next(iter(relpaths))
    (root / "corpus" / relpaths[first]).unlink()
    ws = Workspace(tmp_path / "ws", DocStore(root))
    res = ws.add([first, "not-in-docmap", list(relpaths)[1]])
    assert res.missing == [first, "not-in-docmap"] and res.new == [list(relpaths)[1]]


def test_manifest_survives_reopen(docs, tmp_path):
    root, relpaths = docs
    ids = list(relpaths)
    store = DocStore(root)
    ws = Workspace(tmp_path / "ws", store, keep=True)
    ws.add(ids[:3])
    ws.add(ids[3:5])
    lines = [json.loads(x) for x in (ws.path / MANIFEST).read_text().splitlines()]
    assert [x["docid"] for x in lines] == ids[:5]
    assert set(lines[0]) == {"docid", "relpath", "call", "seq", "time"}
    again = Workspace(tmp_path / "ws", store)
    assert again.arrivals == ws.arrivals and again.calls == 2
    assert again.add(ids[4:6]).new == [ids[5]]
    assert again.arrivals[ids[5]].call == 2 and again.arrivals[ids[5]].seq == 5


def test_cleanup_removes_workspace_but_not_corpus(docs, tmp_path):
    root, relpaths = docs
    with Workspace(tmp_path / "ws", DocStore(root)) as ws:
        ws.add(list(relpaths))
    assert not (tmp_path / "ws").exists()
    assert all((root / "corpus" / rel).exists() for rel in relpaths.values())
    with Workspace(tmp_path / "kept", DocStore(root), keep=True) as ws:
        ws.add(list(relpaths)[:2])
    assert (tmp_path / "kept" / MANIFEST).exists()


def test_refuses_a_directory_that_is_not_a_workspace(docs, tmp_path):
    root, _ = docs
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not a workspace"):
        Workspace(tmp_path / "mine", DocStore(root))
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_cross_filesystem_falls_back_to_copies_with_one_notice(docs, caplog, monkeypatch):
    root, relpaths = docs
    monkeypatch.setattr(workspace, "_FALLBACK_NOTICES", set())  # forget notices given earlier in this process
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(root).st_dev:
        pytest.skip("needs /dev/shm on a different file system than the test's tmp dir")
    with tempfile.TemporaryDirectory(dir=shm) as tmp, caplog.at_level(logging.WARNING):
        ws = Workspace(Path(tmp) / "ws", DocStore(root))
        ids = list(relpaths)
        ws.add(ids[:4])
        ws.add(ids[4:8])
        for d in ids[:8]:
            f, src = ws.files_dir / relpaths[d], root / "corpus" / relpaths[d]
            assert f.read_bytes() == src.read_bytes()
            assert os.stat(f).st_ino != os.stat(src).st_ino
            assert os.stat(f).st_mode & 0o777 == 0o444
        assert ws.copied == 8
        notices = [r for r in caplog.records if "copying files instead" in r.getMessage()]
        assert len(notices) == 1  # once per (source fs, workspace fs) per process, not per file
        ws.close()
        assert not (Path(tmp) / "ws").exists()


def test_documents_of_a_directory_already_open_are_placed_and_refused_as_the_first_one_is(tmp_path):
    """After the first document of a directory, the next ones are linked by name between the two open directories:
    a link, a FIFO, a missing file or a directory reached through a link among them gets exactly what it gets
    alone (the careful way, by descriptor), and nothing but regular files ever stays in the workspace."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path / "docs"
    host = root / "corpus" / "h"
    (host / "sub").mkdir(parents=True)
    (tmp_path / "secret.txt").write_text("SECRET\n")
    for name in ("a.txt", "d.txt", "sub/g.txt"):
        (host / name).write_text(f"text of {name}\n")
    (host / "b.txt").symlink_to(tmp_path / "secret.txt")
    os.mkfifo(host / "c.txt")
    (host / "e.txt").symlink_to("a.txt")
    (root / "corpus" / "lnk").symlink_to("h")
    rels = {
        "a": "h/a.txt",
        "b": "h/b.txt",
        "c": "h/c.txt",
        "d": "h/d.txt",
        "e": "h/e.txt",
        "f": "h/f.txt",  # no such file
        "g": "h/sub/g.txt",
        "x": "lnk/d.txt",  # through a directory link
        "y": "h/sub/g.txt/z.txt",  # below a file
    }
    pq.write_table(pa.table({"docid": list(rels), "relpath": list(rels.values())}), root / "docmap.parquet")
    store = DocStore(root)
    order = ["a", "b", "c", "d", "e", "f", "g", "x", "y", "d"]
    with Workspace(tmp_path / "together", store) as ws:
        together = ws.add(order)
        files = sorted(str(p.relative_to(ws.files_dir)) for p in ws.files_dir.rglob("*") if not p.is_dir())
        for p in ws.files_dir.rglob("*"):
            assert p.is_dir() or (
                stat_regular(p) and os.stat(p).st_ino == os.stat(root / "corpus" / p.relative_to(ws.files_dir)).st_ino
            )
    alone: dict[str, tuple] = {}
    for i, docid in enumerate(dict.fromkeys(order)):
        with Workspace(tmp_path / f"alone{i}", store) as one:
            r = one.add([docid])
            alone[docid] = (r.new, r.missing, r.refused)
    assert together.new == ["a", "d", "g"] == [d for d in dict.fromkeys(order) if alone[d][0]]
    assert together.missing == [d for d in dict.fromkeys(order) if alone[d][1]] == ["f", "y"]
    assert together.refused == {d: alone[d][2][d] for d in dict.fromkeys(order) if alone[d][2]}
    assert set(together.refused) == {"b", "c", "e", "x"} and together.present == 1
    assert files == ["h/a.txt", "h/d.txt", "h/sub/g.txt"]


def stat_regular(p: Path) -> bool:
    import stat

    return stat.S_ISREG(os.lstat(p).st_mode)
