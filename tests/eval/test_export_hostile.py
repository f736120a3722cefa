"""`export bcp` on run directories that fight back: wrong types, a FIFO, links to a device or to a file outside the
run, JSON nested too deeply, a final text that made the citation pattern quadratic, an --out holding a directory
named like a run file. Each is refused in one line naming the file (exit 2), quickly, and nothing outside the run
is read or written.

The hang-prone cases run `rise-batch export` as a subprocess with a timeout, so a hang fails the test instead of
stopping the suite; the limits are generous (only a hang, or a quadratic pass over 200,000 characters, passes them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rise_batch.cli import main
from tests.eval.helpers import trajectory, write_run

REPO = Path(__file__).resolve().parents[2]
RELPATH = "en.wikipedia.org/Lyon.txt"


def world(root: Path, **fields: Any) -> Path:
    """A docs dir with one document (docid 101) and a run with one answered trajectory q1 citing it."""
    docs = root / "docs"
    docs.mkdir()
    pq.write_table(pa.table({"docid": ["101"], "relpath": [RELPATH]}), docs / "docmap.parquet")
    t = trajectory("q1", final_text=f"see {RELPATH}", retrieved_docids=["101"])
    run = write_run(root / "run", [t], config={"docs": str(docs)})
    (run / "trajectories" / "q1.json").write_text(json.dumps(t | fields))
    return run


def export(run: Path, out: Path, *extra: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "rise_batch.cli", "export", "bcp", str(run), "--out", str(out), *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"steps": [1, 2]}, "'steps'"),
        ({"final_text": ["a"]}, "'final_text'"),
        ({"usage": [1]}, "'usage'"),
        ({"usage": {"input_tokens": "many"}}, "'usage'"),
        ({"retrieved_docids": [{"docid": "101"}]}, "'retrieved_docids'"),
        ({"tool_calls": {"search": [1]}}, "'tool_calls'"),
        ({"query_id": None}, "'query_id'"),
    ],
)
def test_a_trajectory_of_the_wrong_types_is_refused_naming_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fields: dict[str, Any], named: str
) -> None:
    run = world(tmp_path, **fields)
    assert main(["export", "bcp", str(run), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(run / "trajectories" / "q1.json") in err and named in err
    assert not (tmp_path / "out").exists()


def test_a_run_json_that_is_not_an_object_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = world(tmp_path)
    (run / "run.json").write_text('["not", "a", "run"]')
    assert main(["export", "bcp", str(run), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(run / "run.json") in err


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def _outside(path: Path) -> None:
    secret = path.parents[2] / "secret.json"
    secret.write_text(json.dumps(trajectory("q2", final_text="root:*:19000:0:99999:7:::")))
    path.symlink_to(secret)


def _deep(path: Path) -> None:
    path.write_text("[" * 200_000 + "]" * 200_000)


def _linked_dir(path: Path) -> None:
    """trajectories/ itself a link to a directory outside the run holding a trajectory."""
    elsewhere = path.parents[2] / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "q2.json").write_text(json.dumps(trajectory("q2", final_text="root:*:19000")))
    real = path.parent
    for f in real.iterdir():
        f.rename(elsewhere / f.name)
    real.rmdir()
    real.symlink_to(elsewhere)


@pytest.mark.parametrize(
    ("plant", "why"),
    [
        (_fifo, "is a FIFO"),
        (_dev_zero, "is a symbolic link"),
        (_outside, "is a symbolic link"),
        (_deep, "nested too deeply"),
        (_linked_dir, "is a symbolic link"),
    ],
)
def test_a_run_file_that_is_not_a_regular_file_below_the_run_is_refused_at_once(
    tmp_path: Path, plant: Any, why: str
) -> None:
    run = world(tmp_path)
    plant(run / "trajectories" / "q2.json")
    done = export(run, tmp_path / "out", timeout=120)  # today's main: a FIFO hangs, /dev/zero reads until MemoryError
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and why in done.stderr and "trajectories" in done.stderr
    assert not (tmp_path / "out").exists()


def test_a_final_text_of_slashes_is_exported_in_linear_time(tmp_path: Path) -> None:
    """200,000 `/` then a citation: the old pattern rescanned the run of slashes from every slash (60,000 took
    25 s, so this would take minutes); the limit only catches that."""
    run = world(tmp_path, final_text="/" * 200_000 + f" and {RELPATH}")
    done = export(run, tmp_path / "out", timeout=60)
    assert done.returncode == 0, done.stderr
    record = json.loads((tmp_path / "out" / "q1.json").read_text())
    assert record["result"][-1]["output"].endswith(" and [101]")


def test_an_out_holding_a_directory_named_like_a_run_file_is_refused_and_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = world(tmp_path)
    (tmp_path / "out" / "d.json").mkdir(parents=True)
    (tmp_path / "out" / "d.json" / "keep").write_text("mine")
    for extra in ([], ["--force"]):
        assert main(["export", "bcp", str(run), "--out", str(tmp_path / "out"), *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(tmp_path / "out" / "d.json") in err
    assert (tmp_path / "out" / "d.json" / "keep").read_text() == "mine"
    (tmp_path / "file").write_text("not a directory")
    assert main(["export", "bcp", str(run), "--out", str(tmp_path / "file")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert (tmp_path / "file").read_text() == "not a directory"
