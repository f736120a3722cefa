"""`run --workspace-root R` leaves what is not the run's alone: a root holding anything else is refused in one line
with nothing touched (its mode, its files), a root the run creates carries the run's marker, and a second run
cannot take over a root another run claimed. Runs are real (`rise-batch run`, bubblewrap, the fake server)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from rise_batch.agent.workspace_root import MARKER, claim_workspace_root
from rise_batch.cli import main
from rise_batch.errors import ConfigError
from tests.agent.conftest import agent_world, fake_server  # noqa: F401  (fixtures)
from tests.agent.helpers import read_trajectories, run_dir, title_query, world, write_queries


def run_args(out: Path, root: Path, base_url: str) -> list[str]:
    w = world()
    docid, title = next(iter(w.titles.items()))
    queries = write_queries(out.parent / f"{out.name}-q.jsonl", [title_query(docid, title)])
    return [
        "run", "--queries", str(queries), "--system", "rise", "--docs", str(w.docs), "--index", str(w.index),
        "--out", str(out), "--workers", "0", "--index-backend", "numpy", "--no-progress", "--base-url", base_url,
        "--model", "gpt-5.4-mini", "--workspace-root", str(root),
    ]  # fmt: skip


def shared_scratch(path: Path) -> Path:
    """A directory like a shared scratch space: mode 1777, a user's workspace-looking `q1/` with a file."""
    (path / "q1").mkdir(parents=True)
    (path / "q1" / "notes.txt").write_text("mine")
    os.chmod(path, 0o1777)
    return path


def test_a_root_holding_anything_else_is_refused_untouched(agent_world, fake_server, capsys, tmp_path):  # noqa: F811
    root = shared_scratch(tmp_path / "scratch")
    out = run_dir("ws-root-refused")
    assert main(run_args(out / "run", root, fake_server.base_url)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(root) in err and "does not exist yet" in err
    assert stat.S_IMODE(root.stat().st_mode) == 0o1777  # the sticky bit stays (today's main: 0755)
    assert (root / "q1" / "notes.txt").read_text() == "mine" and sorted(os.listdir(root)) == ["q1"]
    assert not (out / "run").exists()  # nothing of the run written


def test_a_root_the_run_creates_is_its_own_and_no_other_runs(agent_world, fake_server, capsys):  # noqa: F811
    base = run_dir("ws-root-created")
    root = base / "ws"
    assert main(run_args(base / "run", root, fake_server.base_url)) == 0
    assert len(read_trajectories(base / "run")) == 1
    assert stat.S_IMODE(root.stat().st_mode) == 0o755
    assert os.listdir(root) == [MARKER]  # the workspace itself removed after its trajectory
    assert json.loads((root / MARKER).read_text())["run_dir"] == str((base / "run").resolve())
    assert main(run_args(base / "run", root, fake_server.base_url)) == 0  # the same run resumes in it
    capsys.readouterr()
    assert main(run_args(base / "other", root, fake_server.base_url)) == 2  # another run cannot share it
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds the workspaces of the run in" in err


def test_an_empty_root_is_used_and_its_mode_kept(tmp_path: Path) -> None:
    root = tmp_path / "empty"
    root.mkdir()
    os.chmod(root, 0o1777)
    assert claim_workspace_root(root, tmp_path / "run", default=False) == root
    assert stat.S_IMODE(root.stat().st_mode) == 0o1777 and os.listdir(root) == [MARKER]


def test_roots_that_cannot_be_claimed(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is not a directory"):
        claim_workspace_root(tmp_path / "file", tmp_path / "run", default=False)
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / MARKER).symlink_to(tmp_path / "file")
    with pytest.raises(ConfigError, match="is a symbolic link"):
        claim_workspace_root(linked, tmp_path / "run", default=False)
    # a run directory's own workspaces/ made before the marker existed is adopted, its leftovers kept
    legacy = tmp_path / "run" / "workspaces"
    (legacy / "q1").mkdir(parents=True)
    assert claim_workspace_root(legacy, tmp_path / "run", default=True) == legacy
    assert sorted(os.listdir(legacy)) == [MARKER, "q1"]
    # a worker accepts its driver's marker whatever run directory it names; the driver does not
    assert claim_workspace_root(legacy, tmp_path / "elsewhere", default=False, driver=False) == legacy
    with pytest.raises(ConfigError, match="holds the workspaces of the run in"):
        claim_workspace_root(legacy, tmp_path / "elsewhere", default=False)
