"""A workspace is the engine's own or refused, and nothing outside it is ever linked into, replaced or unlinked,
through the real `rise-batch workspace search|bash|read` commands.

Before the fix: a pre-made workspace whose `files/en.wikipedia.org` was a symlink to an outside directory holding
`Anarchism.txt` got that outside file deleted and replaced by a hardlink to the corpus document (and the other hits
linked into the outside directory); `workspace bash` followed a `files` symlink and listed the outside files.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from rise_batch.space.manifest import FILES, MANIFEST
from tests.conftest import REPO, sample_rows, write_jsonl
from tests.space.conftest import make_docs
from tests.space.test_hostile_docs import other_fs  # noqa: F401  (a fixture: a directory on another file system)

OUTSIDE = "an outside file the engine must never touch\n"


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    from rise_batch.index import build_index

    root = tmp_path_factory.mktemp("spaces")
    _, relpaths = make_docs(root / "docs")
    assert "en.wikipedia.org/Anarchism.txt" in relpaths.values()
    write_jsonl(root / "corpus.jsonl", sample_rows(len(relpaths)))
    build_index(root / "corpus.jsonl", root / "index", workers=1)
    return root


@pytest.fixture
def parent() -> Path:
    """A world-traversable parent for workspaces (the sandbox's uid must reach them)."""
    d = Path(tempfile.mkdtemp(prefix="rise-hostile-ws-"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(params=["same-fs", "other-fs"])
def outside(request, tmp_path) -> Path:
    """A directory outside every workspace holding an `Anarchism.txt` of its own (on the docs' file system, or on
    another one, where the engine would copy instead of linking)."""
    base = tmp_path if request.param == "same-fs" else request.getfixturevalue("other_fs")
    d = base / "outside"
    d.mkdir()
    (d / "Anarchism.txt").write_text(OUTSIDE)
    return d


def cli(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "rise_batch.cli", "workspace", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300)


def search(world: Path, ws: Path, *queries: str) -> subprocess.CompletedProcess:
    return cli("search", "--index", str(world / "index"), "--docs", str(world / "docs"), "--workspace", str(ws),
               "-k", "5", *queries)  # fmt: skip


def untouched(outside: Path, inode: int) -> None:
    assert sorted(p.name for p in outside.iterdir()) == ["Anarchism.txt"]
    assert (outside / "Anarchism.txt").read_text() == OUTSIDE and (outside / "Anarchism.txt").stat().st_ino == inode
    assert (outside / "Anarchism.txt").stat().st_nlink == 1


def one_line_refusal(res: subprocess.CompletedProcess, *words: str) -> None:
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    lines = [line for line in res.stderr.splitlines() if all(w in line for w in words)]
    assert len(lines) == 1, res.stderr


def test_a_premade_workspace_with_a_symlinked_directory_is_refused_and_nothing_outside_is_touched(
    world, parent, outside
):
    ws = parent / "ws"
    (ws / FILES).mkdir(parents=True)
    (ws / MANIFEST).write_text("")
    (ws / FILES / "en.wikipedia.org").symlink_to(outside, target_is_directory=True)
    inode = (outside / "Anarchism.txt").stat().st_ino
    res = search(world, ws, "anarchism", "autism")
    one_line_refusal(res, str(ws), "not a workspace made by rise-batch")
    untouched(outside, inode)


def test_a_directory_swapped_for_a_symlink_in_an_engine_made_workspace_is_refused(world, parent, outside):
    ws = parent / "ws"
    assert search(world, ws, "autism").returncode == 0
    host = ws / FILES / "en.wikipedia.org"
    assert not (host / "Anarchism.txt").exists()
    host.rename(parent / "moved")
    host.symlink_to(outside, target_is_directory=True)
    inode = (outside / "Anarchism.txt").stat().st_ino
    res = search(world, ws, "anarchism", "autism")
    one_line_refusal(res, f"{ws / FILES}/en.wikipedia.org", "replaced by a link")
    untouched(outside, inode)


def test_bash_and_read_refuse_a_workspace_whose_files_is_a_link(world, parent, outside, bwrap_ok):
    ws = parent / "ws"
    assert search(world, ws, "autism").returncode == 0
    shutil.rmtree(ws / FILES)
    (ws / FILES).symlink_to(outside, target_is_directory=True)
    res = cli("bash", str(ws), "ls -R; cat */* *")
    one_line_refusal(res, str(ws / FILES), "is a symbolic link")
    assert "Anarchism" not in res.stdout and OUTSIDE.strip() not in res.stdout
    res = cli("read", str(ws), "Anarchism.txt")
    assert res.returncode != 0 and OUTSIDE.strip() not in res.stdout + res.stderr


def test_bash_refuses_a_directory_the_engine_did_not_make(world, parent, bwrap_ok):
    ws = parent / "ws"
    (ws / FILES).mkdir(parents=True)
    (ws / MANIFEST).write_text("")
    one_line_refusal(cli("bash", str(ws), "true"), str(ws), "not a workspace made by rise-batch")
