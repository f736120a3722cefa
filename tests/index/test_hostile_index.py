"""An index or a docs dir cannot hang or flood `workspace search`: every file it reads is opened as a document is
(rise_batch.safe_read), so a FIFO, a device or a link in place of one of them is refused at once in one line
naming the path, and nothing is read from it.

Before the fix (main at 2ce0c40): a FIFO in place of docmap.strtab, docids.strtab, vocab.strtab, docmap.parquet,
docids.json, params.index.json or data.csc.index.npy made `workspace search` hang for good (only a FIFO meta.json
was refused); docmap.parquet a symlink to /dev/zero was read until the machine ran out of memory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, sample_rows, write_jsonl
from tests.space.conftest import make_docs

HANG_S = 120  # only a hang fails this


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    """A docs dir and its index, each table already derived once (as after a first search)."""
    from rise_batch.index import build_index, load_index
    from rise_batch.space.docstore import DocStore

    root = tmp_path_factory.mktemp("hostile-index")
    docs, relpaths = make_docs(root / "docs")
    write_jsonl(root / "corpus.jsonl", sample_rows(len(relpaths)))
    build_index(root / "corpus.jsonl", root / "index", workers=1)
    load_index(root / "index", backend="numpy", warmup=False)
    DocStore(docs)  # derives docmap.strtab
    assert (docs / "docmap.strtab").is_file() and (root / "index" / "vocab.strtab").is_file()
    return docs, root / "index"


@pytest.fixture
def copies(built, tmp_path) -> tuple[Path, Path]:
    docs, index = built
    shutil.copytree(docs, tmp_path / "docs")
    shutil.copytree(index, tmp_path / "index")
    return tmp_path / "docs", tmp_path / "index"


def _search(docs: Path, index: Path, ws: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "rise_batch.cli", "workspace", "search", "--index", str(index), "--docs", str(docs)]
    cmd += ["--workspace", str(ws), "-k", "3", "autism"]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=HANG_S)


FILES = [
    ("docs", "docmap.parquet"),
    ("index", "docids.json"),
    ("index", "params.index.json"),
    ("index", "data.csc.index.npy"),
    ("index", "indptr.csc.index.npy"),
    ("index", "meta.json"),
]
TABLES = [("docs", "docmap.strtab"), ("index", "docids.strtab"), ("index", "vocab.strtab")]


@pytest.mark.parametrize(("where", "name"), FILES)
def test_a_fifo_in_place_of_an_index_or_docs_file_is_refused_at_once(copies, tmp_path, where, name) -> None:
    """The file a search needs is a FIFO: exit 2 with one line naming it (no hang); a table derived from it is not
    derived (the stale one is not used either)."""
    docs, index = copies
    path = (docs if where == "docs" else index) / name
    path.unlink()
    os.mkfifo(path)
    if name in ("docmap.parquet", "docids.json"):  # a table derived from it is stale now: it must be derived again
        stale = path.with_name("docmap.strtab" if where == "docs" else "docids.strtab")
        stale.unlink()
    res = _search(docs, index, tmp_path / "ws")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and str(path) in res.stderr and "FIFO" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr


@pytest.mark.parametrize(("where", "name"), TABLES)
def test_a_fifo_in_place_of_a_string_table_is_never_read(copies, tmp_path, where, name) -> None:
    """A FIFO table is not opened (it would block): the table is derived again from its source, and the search
    answers as with the real one."""
    docs, index = copies
    path = (docs if where == "docs" else index) / name
    path.unlink()
    os.mkfifo(path)
    res = _search(docs, index, tmp_path / "ws")
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr and "autism" in res.stdout.lower()
    assert path.is_file() and not path.is_symlink()  # derived again, in place of the FIFO


@pytest.mark.parametrize("target", ["/dev/zero", "outside"])
def test_docmap_a_symlink_is_refused_never_read(copies, tmp_path, target) -> None:
    """docmap.parquet a symlink to /dev/zero (read without bound before: the machine ran out of memory) or to a
    docmap outside the docs dir: refused in one line naming it."""
    docs, index = copies
    path = docs / "docmap.parquet"
    if target == "outside":
        shutil.copy(path, tmp_path / "elsewhere.parquet")
        target = str(tmp_path / "elsewhere.parquet")
    path.unlink()
    path.symlink_to(target)
    (docs / "docmap.strtab").unlink()
    res = _search(docs, index, tmp_path / "ws")
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"{path} is a symbolic link" in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_an_index_array_shorter_than_meta_records_is_refused(copies, tmp_path) -> None:
    """An array whose length is not what meta.json records is refused before the scorer indexes it."""
    import numpy as np

    docs, index = copies
    np.save(index / "data.csc.index.npy", np.zeros(3, np.float32))
    res = _search(docs, index, tmp_path / "ws")
    assert res.returncode == 2 and "data.csc.index.npy holds 3 items" in res.stderr, res.stderr
