"""A report over many trajectories: the per-trajectory work done by forked workers gives what one process gives,
and report.json's per-query rows stay bounded however many steps a trajectory has."""

from __future__ import annotations

import json
import os
from pathlib import Path

from rise_batch.eval import forkmap
from rise_batch.eval.forkmap import fork_map
from rise_batch.eval.metrics import per_query_rows
from rise_batch.eval.report import ROW_LIST_MAX, write_report
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
