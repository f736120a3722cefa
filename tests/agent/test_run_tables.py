"""No string table is derived inside a trajectory actor: `structure` (with --index) and `materialize` write every
table a run reads, and a run whose tables are missing derives them in a process of its own, which ends before the
first trajectory starts.

Before the fix: `structure` left docmap.strtab to the first run, whose first trajectory derived it (at 1M documents
that actor then held ~460 MB of private memory for its life, against ~160 MB for every later run's actors).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rise_batch.agent.run_tables import stale_tables
from rise_batch.cli import main
from rise_batch.corpus.docmap_table import DOCMAP_TABLE
from rise_batch.index.tables import DOCIDS_TABLE, VOCAB_TABLE
from tests.agent.helpers import run_dir, title_query, write_queries
from tests.conftest import REPO, sample_rows, write_jsonl

HANG_S = 300  # only a hang fails this


def _cli(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "rise_batch.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=HANG_S)


def test_structure_and_materialize_write_every_table_a_run_reads(tmp_path):
    write_jsonl(tmp_path / "corpus.jsonl", sample_rows(20))
    out = tmp_path / "out"
    args = ["--corpus", str(tmp_path / "corpus.jsonl"), "--out", str(out), "--backend", "heuristic"]
    res = _cli("structure", *args, "--workers", "0", "--index")
    assert res.returncode == 0, res.stderr
    tables = [out / DOCMAP_TABLE, out / "index" / DOCIDS_TABLE, out / "index" / VOCAB_TABLE]
    assert all(t.is_file() for t in tables) and stale_tables([out], out / "index") == []
    (out / DOCMAP_TABLE).unlink()
    res = _cli("materialize", str(out))
    assert res.returncode == 0, res.stderr
    assert (out / DOCMAP_TABLE).is_file() and stale_tables([out], out / "index") == []


def _world_without_tables(name: str, agent_world) -> tuple[Path, Path, list[Path], list[str]]:
    """A copy of the shared docs dir (with its index) whose tables are deleted; (root, docs, tables, run argv)."""
    root = run_dir(name)
    docs = root / "docs"
    shutil.copytree(agent_world.docs, docs)
    index = docs / "index"
    tables = [docs / DOCMAP_TABLE, index / DOCIDS_TABLE, index / VOCAB_TABLE]
    for table in tables:
        table.unlink(missing_ok=True)
    docid, title = next(iter(agent_world.titles.items()))
    queries = write_queries(root / "q.jsonl", [title_query(docid, title)])
    argv = ["run", "--queries", str(queries), "--system", "snippet-toc", "--index", str(index), "--docs", str(docs)]
    argv += ["--out", str(root / "run"), "--no-progress", "--index-backend", "numpy", "--log-level", "info"]
    return root, docs, tables, argv


def _derived_before_the_first_trajectory(root: Path, docs: Path, tables: list[Path], said: list[str], pid: int):
    """One line names every table and a process that is not `pid`; every table is current and was written before
    the driver pinned the run (run.json), so before any worker or trajectory started."""
    assert len(said) == 1 and all(str(t) in said[0] for t in tables), said
    assert int(re.search(r"\(pid (\d+)\)", said[0]).group(1)) != pid  # not the process that runs the trajectories
    assert stale_tables([docs], docs / "index") == []
    events = [json.loads(line) for line in (root / "run" / "events.jsonl").read_text().splitlines()]
    first = min(e["t"] for e in events if e.get("event") == "start")
    assert all(t.stat().st_mtime < first for t in tables)
    pinned = (root / "run" / "run.json").stat().st_mtime_ns  # written by the driver before any worker starts
    assert all(t.stat().st_mtime_ns <= pinned for t in tables)


def test_a_run_derives_its_missing_tables_in_a_process_that_ends_before_the_first_trajectory(agent_world, fake_server):
    root, docs, tables, argv = _world_without_tables("tables-ahead", agent_world)
    cmd = [sys.executable, "-m", "rise_batch.cli", *argv, "--workers", "0", "--base-url", fake_server.base_url]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 0, err
    said = [line for line in err.splitlines() if "in a process of its own" in line]
    _derived_before_the_first_trajectory(root, docs, tables, said, proc.pid)


@pytest.mark.slow
def test_on_a_ray_worker_the_tables_exist_before_its_first_trajectory(agent_world, fake_server, ray_local, caplog):
    """The same with a real Ray actor running the trajectory: the driver derived the tables (in a process of its
    own) before the actor started, so the actor only maps them."""
    root, docs, tables, argv = _world_without_tables("tables-ahead-ray", agent_world)
    caplog.set_level("INFO", logger="rise_batch.agent.run_tables")
    assert main([*argv, "--workers", "1", "--base-url", fake_server.base_url]) == 0
    said = [r.getMessage() for r in caplog.records if "in a process of its own" in r.getMessage()]
    _derived_before_the_first_trajectory(root, docs, tables, said, os.getpid())
