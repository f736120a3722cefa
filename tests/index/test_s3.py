"""`rise-batch index` from and into object storage (a real S3 server): the index is built on local disk and
published with meta.json last; opening it searches a verified local copy, made once and reused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rise_batch.cache import MARKER
from rise_batch.cli import main
from rise_batch.index.retriever import open_retriever
from rise_batch.index.search import local_index
from rise_batch.storage import location
from tests.conftest import sample_rows


def test_index_built_into_s3_searches_as_a_local_one(tmp_path, s3, monkeypatch, capsys):
    monkeypatch.setenv("RISE_BATCH_CACHE", str(tmp_path / "cache"))
    data = "".join(json.dumps(r) + "\n" for r in sample_rows(50)).encode()
    (tmp_path / "c.jsonl").write_bytes(data)
    root = location(s3.uri())
    (root / "c.jsonl").write_bytes(data)
    assert main(["index", "--corpus", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "idx"), "--workers", "1"]) == 0
    assert main(["index", "--corpus", f"{root}/c.jsonl", "--out", f"{root}/idx", "--workers", "1",
                 "--query", "anarchism"]) == 0  # fmt: skip
    assert f"out={root}/idx" in capsys.readouterr().out
    meta = json.loads((root / "idx" / "meta.json").read_text())
    assert meta["corpus"]["path"] == f"{root}/c.jsonl" and meta["counts"]["n_docs"] == 50
    queries = ["anarchism", "albedo light", "alabama river"]
    want = open_retriever(tmp_path / "idx").search(queries, 5)
    got = open_retriever(f"{root}/idx").search(queries, 5)
    assert [h.docids for h in got] == [h.docids for h in want]
    assert local_index(f"{root}/idx") == local_index(f"{root}/idx")  # one copy, reused
    assert len(list((tmp_path / "cache" / "index").glob("[!.]*"))) == 1  # beside it, its lock file
    # an index directory without its meta.json (an interrupted publish) is never used
    (root / "half" / "docids.json").write_bytes(b"[]")
    with pytest.raises(FileNotFoundError, match="no meta.json"):
        local_index(f"{root}/half")
    assert main(["index", "--corpus", f"{root}/c.jsonl", "--out", f"{root}/idx", "--workers", "1"]) == 2
    assert "exists and is not empty" in capsys.readouterr().err


@pytest.mark.parametrize("retriever", ["hybrid", "dense"])
def test_dense_and_hybrid_indexes_in_s3_search_as_local_ones(retriever, tmp_path, s3, monkeypatch, capsys):
    """A dense or hybrid index is published to the bucket with its done marker last (it was refused before) and
    opened from a verified local copy; its hits equal the same index built on disk."""
    pytest.importorskip("wordllama")
    monkeypatch.setenv("RISE_BATCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.jsonl").write_bytes("".join(json.dumps(r) + "\n" for r in sample_rows(30)).encode())
    root = location(s3.uri())
    common = ["--corpus", str(tmp_path / "c.jsonl"), "--workers", "1", "--retriever", retriever]
    assert main(["index", *common, "--out", str(tmp_path / "idx")]) == 0
    assert main(["index", *common, "--out", f"{root}/idx"]) == 0
    assert f"published out={root}/idx" in capsys.readouterr().err
    assert (root / "idx" / "dense" / "meta.json").is_file()
    assert (root / "idx" / "meta.json").is_file() == (retriever == "hybrid")
    queries = ["anarchism", "albedo light", "alabama river"]
    want = open_retriever(tmp_path / "idx", retriever, backend="numpy").search(queries, 5)
    got = open_retriever(f"{root}/idx", retriever, backend="numpy").search(queries, 5)
    assert [h.docids for h in got] == [h.docids for h in want]
    assert not any(p.name.startswith("s3") for p in tmp_path.iterdir())
    assert main(["index", *common, "--out", f"{root}/idx"]) == 2  # an existing one, as on disk
    assert "exists and is not empty" in capsys.readouterr().err


def swap(path, a: str, b: str) -> None:
    """Two same-length docids swapped in a file in place (its size, hence a size-only check, unchanged)."""
    data = path.read_bytes().replace(a.encode(), b"\0SWAP\0").replace(b.encode(), a.encode())
    path.write_bytes(data.replace(b"\0SWAP\0", b.encode()))


def test_a_forged_cached_index_is_made_again_from_its_source(tmp_path, s3, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("RISE_BATCH_CACHE", str(cache))
    data = "".join(json.dumps(r) + "\n" for r in sample_rows(50)).encode()
    root = location(s3.uri())
    (root / "c.jsonl").write_bytes(data)
    assert main(["index", "--corpus", f"{root}/c.jsonl", "--out", f"{root}/idx", "--workers", "1"]) == 0
    want = open_retriever(f"{root}/idx").search(["anarchism"], 3)[0].docids
    entry = Path(local_index(f"{root}/idx"))
    first = want[0]
    other = next(d for d in json.loads((entry / "docids.json").read_text()) if len(d) == len(first) and d != first)
    for name in ("docids.json", "docids.strtab"):  # docids swapped; the entry's own marker still matches
        swap(entry / name, first, other)
    marker = json.loads((entry / MARKER).read_text())
    assert all((entry / rel).stat().st_size == n for rel, n in marker["files"].items())
    assert open_retriever(f"{root}/idx").search(["anarchism"], 3)[0].docids == want
    forged = tmp_path / "forged"  # the entry a link to a forged tree, marker and all
    shutil.copytree(entry, forged)
    for name in ("docids.json", "docids.strtab"):
        swap(forged / name, first, other)
    shutil.rmtree(entry)
    entry.symlink_to(forged)
    assert open_retriever(f"{root}/idx").search(["anarchism"], 3)[0].docids == want
    assert entry.is_dir() and not entry.is_symlink() and (forged / "docids.json").is_file()
