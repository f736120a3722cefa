"""A report over many trajectories: the per-trajectory work done by forked workers gives what one process gives,
a report over several runs (a sweep's cells) written by a worker per run is byte for byte the one a single core
writes, and report.json's per-query rows stay bounded however many steps a trajectory has."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from bench.report_html import write_run as synthetic_run
from rise_batch.eval import forkmap
from rise_batch.eval.forkmap import fork_each, fork_map, workers
from rise_batch.eval.metrics import per_query_rows
from rise_batch.eval.report import ROW_LIST_MAX, write_report
from tests.cli import cli_argv, cli_env
from tests.eval.helpers import judgment, trajectory, write_run


def search_steps(q: int, n: int) -> list[dict]:
    return [{"tool": "search", "arguments": {"queries": [f"s{i}"]}, "output": "x", "surfaced": [f"d{q}"],
             "added": 1, "output_lines": 1} for i in range(n)]  # fmt: skip


def test_fork_map_returns_what_one_process_computes_in_order() -> None:
    def fn(a: int, b: int) -> list[tuple[int, int]]:
        return [(i * i, os.getpid()) for i in range(a, b)]

    out = fork_map(fn, 1000, processes=2)
    assert [x for x, _ in out] == [i * i for i in range(1000)]
    pids = {p for _, p in out}
    assert os.getpid() not in pids and len(pids) >= 1  # done by forked workers
    assert fork_map(fn, 10) == fn(0, 10)  # small: in this process


def test_fork_each_calls_each_item_in_a_worker_in_order_and_a_worker_forks_no_pool_of_its_own() -> None:
    def fn(i: int) -> tuple[int, int, list[int]]:
        inner = fork_map(lambda a, b: [os.getpid() for _ in range(a, b)], 1000, processes=2)
        return i * i, os.getpid(), sorted(set(inner))

    out = fork_each(fn, 5, processes=2)
    assert [x for x, _, _ in out] == [i * i for i in range(5)]
    assert all(pid != os.getpid() and inner == [pid] for _, pid, inner in out)  # the inner map ran in the worker
    assert fork_each(lambda i: os.getpid(), 3, processes=1) == [os.getpid()] * 3


def tree(out: Path) -> dict[str, str]:
    """Every file of a report by its path under `out`, hashed with `out` itself written as OUT."""
    return {str(f.relative_to(out)): hashlib.sha256(f.read_bytes().replace(str(out).encode(), b"OUT")).hexdigest()
            for f in sorted(out.rglob("*")) if f.is_file()}  # fmt: skip


@pytest.mark.skipif(workers() < 2, reason="needs two cores to compare with one")
def test_a_report_over_several_runs_is_the_same_from_a_worker_per_run_as_from_one_core(tmp_path: Path) -> None:
    """`rise-batch report` over four synthetic runs (bash commands, reads, searches, events) on every core of this
    process, then under `taskset` on one core, where every run is done in the one process: the same files, byte for
    byte (the data file of every trajectory, report.json, report.md, report.html with its figures)."""
    runs = [synthetic_run(tmp_path / f"run{i}", ("rise", "rise-bm25")[i % 2], 30, 12, 300, i) for i in range(4)]
    wide = subprocess.run(cli_argv("report", *runs, "--out", tmp_path / "wide"), env=cli_env(), capture_output=True)
    core = min(os.sched_getaffinity(0))
    one = subprocess.run(["taskset", "-c", str(core), *cli_argv("report", *runs, "--out", tmp_path / "one")],
                         env=cli_env(), capture_output=True)  # fmt: skip
    assert wide.returncode == one.returncode == 0, (wide.stderr, one.stderr)
    assert len(list((tmp_path / "wide" / "report_html" / "traj").rglob("*.js"))) == 4 * 30
    assert tree(tmp_path / "wide") == tree(tmp_path / "one")


def test_per_query_rows_forked_equal_the_rows_of_one_process() -> None:
    ts = {f"q{q}": trajectory(f"q{q}", gold_doc_ids=[f"d{q}"], retrieved_docids=[f"d{q}"], steps=search_steps(q, 3))
          for q in range(600)}  # fmt: skip
    js = {f"q{q}": judgment(q % 2 == 0) for q in range(0, 600, 3)}
    forked = per_query_rows(ts, js)
    saved = forkmap.MIN_ITEMS
    forkmap.MIN_ITEMS = 1 << 62
    try:
        assert forked == per_query_rows(ts, js)
    finally:
        forkmap.MIN_ITEMS = saved


def test_report_json_rows_keep_at_most_row_list_max_entries_of_a_list(tmp_path: Path) -> None:
    """A trajectory of 60 searches, each showing the gold: report.json keeps 20 steps of each list and says how many
    there were; the trajectory's data file for report.html keeps all 60."""
    t = trajectory("q1", gold_doc_ids=["d1"], retrieved_docids=["d1"], steps=search_steps(1, 60))
    run = write_run(tmp_path / "run", [t], {"q1": judgment(True)})
    report = write_report([run], tmp_path / "out")
    assert len(report["runs"][0]["per_query"][0]["workspace_growth"]) == 60  # in memory: whole
    row = json.loads((tmp_path / "out" / "report.json").read_text())["runs"][0]["per_query"][0]
    assert len(row["workspace_growth"]) == len(row["gold_surfaced_steps"]) == ROW_LIST_MAX
    assert row["cut"] == {"gold_surfaced_steps": 60, "workspace_growth": 60}
    assert row["gold_surfaced_steps"] == list(range(ROW_LIST_MAX))
    data = (tmp_path / "out" / "report_html" / "traj" / "0" / "0.js").read_text()
    assert data.count('"workspace":{') == 60
