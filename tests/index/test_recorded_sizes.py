"""Every index and docs file read whole is read with the size its writer recorded as the bound: an index's meta.json
records each file's size (`files`), a `structure` run's manifest.json records docmap.parquet's. A file grown or
replaced since (here sparse files of 6 GiB, made with truncate) is refused in one line, exit 2, before it is read:
`workspace search` runs under an address-space limit of 4 GiB, where a whole read would fail.

Before the fix: a 3 GB sparse docids.json was read whole (a MemoryError traceback under a 4 GB limit; the bound was
16 GB) and a 3 GB docmap.parquet was read whole (3.2 GB resident) before it was refused.
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, sample_rows, write_jsonl

HANG_S = 300  # only a hang fails this
LIMIT = 4 << 30  # the address space a search runs in: a clean search needs well under 2 GiB
SPARSE = 6 << 30  # bigger than LIMIT, so reading it whole cannot succeed


def _cli(*args: str, limit: int | None = None) -> subprocess.CompletedProcess:
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return subprocess.run(
        [sys.executable, "-m", "rise_batch.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=HANG_S,
        preexec_fn=cap if limit else None,
    )


@pytest.fixture(scope="module")
def structured(tmp_path_factory) -> Path:
    """A real `structure` OUT (heuristic backend) with its index (--index)."""
    root = tmp_path_factory.mktemp("recorded")
    write_jsonl(root / "corpus.jsonl", sample_rows(20))
    args = ["--corpus", str(root / "corpus.jsonl"), "--out", str(root / "out"), "--backend", "heuristic"]
    res = _cli("structure", *args, "--workers", "0", "--index")
    assert res.returncode == 0, res.stderr
    return root / "out"


@pytest.fixture
def out(structured, tmp_path) -> Path:
    shutil.copytree(structured, tmp_path / "out")
    return tmp_path / "out"


def _search(out: Path, ws: Path) -> subprocess.CompletedProcess:
    args = ["workspace", "search", "--index", str(out / "index"), "--docs", str(out), "--workspace", str(ws)]
    return _cli(*args, "-k", "3", "anarchism", limit=LIMIT)


def test_the_writers_record_each_file_size(structured):
    meta = json.loads((structured / "index" / "meta.json").read_text())
    files = {p.name: p.stat().st_size for p in (structured / "index").iterdir() if p.name != "meta.json"}
    assert meta["files"] == files and {"docids.json", "vocab.index.json", "docids.strtab"} <= set(files)
    manifest = json.loads((structured / "manifest.json").read_text())
    assert manifest["files"] == {"docmap.parquet": (structured / "docmap.parquet").stat().st_size}


def test_a_clean_search_fits_the_limit(out, tmp_path):
    res = _search(out, tmp_path / "ws")
    assert res.returncode == 0 and "Anarchism.txt" in res.stdout, res.stderr


@pytest.mark.parametrize("name", ["docids.json", "vocab.index.json"])
def test_an_index_file_grown_past_its_recorded_size_is_refused_before_it_is_read(out, tmp_path, name):
    path = out / "index" / name
    recorded = path.stat().st_size
    (path.with_suffix(".strtab") if name == "docids.json" else out / "index" / "vocab.strtab").unlink()
    subprocess.run(["truncate", "-s", str(SPARSE), str(path)], check=True)
    res = _search(out, tmp_path / "ws")
    assert res.returncode == 2, res.stdout + res.stderr
    want = f"{path} is {SPARSE:,} bytes where {out / 'index' / 'meta.json'} records {recorded:,}"
    assert want in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_a_docmap_grown_past_its_recorded_size_is_refused_before_it_is_read(out, tmp_path):
    path = out / "docmap.parquet"
    recorded = path.stat().st_size
    subprocess.run(["truncate", "-s", str(SPARSE), str(path)], check=True)
    res = _search(out, tmp_path / "ws")
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"{path} is {SPARSE:,} bytes where {out / 'manifest.json'} records {recorded:,}" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_a_docmap_with_no_record_is_read_from_its_footer_never_whole(out, tmp_path):
    """A docs dir without a manifest (made by hand): the sparse docmap is opened by pyarrow, its footer is not
    Parquet's, and it is refused without being read."""
    (out / "manifest.json").unlink()
    path = out / "docmap.parquet"
    subprocess.run(["truncate", "-s", str(SPARSE), str(path)], check=True)
    res = _search(out, tmp_path / "ws")
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"{path} is not a Parquet docmap" in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_an_index_array_larger_than_its_recorded_length_allows_is_refused_before_it_is_mapped(out, tmp_path):
    """meta.json's counts give each array's length: a file larger than any array of that length can be is refused
    in one line, never mapped."""
    path = out / "index" / "data.csc.index.npy"
    subprocess.run(["truncate", "-s", str(SPARSE), str(path)], check=True)
    res = _search(out, tmp_path / "ws")
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"{path} is over" in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
