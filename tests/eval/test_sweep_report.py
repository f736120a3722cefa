"""A sweep's report answers "which is better, at what cost": a real 2 systems x 2 K sweep (`rise-batch sweep`, in
process, against the fake server) compared along each factor only, every table naming runs by what they are, its
spend (agents, judge, total) per cell and for the sweep in report.md, report.html, report.json and sweep.json, the
page's wide tables each in a box of its own, and `rise-batch report` printing a summary, not report.md."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from rise_batch.cli import main
from rise_batch.eval.comparisons import factor_pairs
from rise_batch.fake_llm import FakeLLMServer
from rise_batch.money.spent import spent_usd
from tests.agent.conftest import agent_world  # noqa: F401 - the shared docs + index world
from tests.agent.helpers import run_dir
from tests.commands.test_sweep_command import queries_of, sweep_config
from tests.eval.test_report_html import md_tables

CELLS = [  # the grid's order: systems outer, K inner
    "rise__gpt-5.4-mini__k5__sample",
    "rise__gpt-5.4-mini__k50__sample",
    "rise-bm25__gpt-5.4-mini__k5__sample",
    "rise-bm25__gpt-5.4-mini__k50__sample",
]


@pytest.fixture(scope="session")
def swept(agent_world) -> Path:  # noqa: F811
    """OUT of a finished, judged and reported 2 x 2 sweep of 4 queries."""
    d = run_dir("sweep-report-2x2")
    q = queries_of(agent_world, d / "q.jsonl", 4)
    with FakeLLMServer() as server:
        cfg = sweep_config(d / "s.yaml", str(d / "out"), str(q), str(agent_world.docs), str(agent_world.index),
                           server.base_url)  # fmt: skip
        data = yaml.safe_load(cfg.read_text())
        data["sweep"]["k"] = [5, 50]
        cfg.write_text(yaml.safe_dump(data))
        assert main(["sweep", str(cfg)]) == 0
    return d / "out"


def test_the_sweep_is_compared_along_each_factor_never_two_at_once(swept: Path) -> None:
    report = json.loads((swept / "report" / "report.json").read_text())
    assert [Path(r["run_dir"]).name for r in report["runs"]] == CELLS
    pairs = [(p["factor"], p["a_run"], p["b_run"]) for p in report["paired"]]
    # each pair of systems at each K, each pair of K values for each system; never 1v4 or 2v3 (system and K differ)
    assert pairs == [("system", 1, 3), ("system", 2, 4), ("k", 1, 2), ("k", 3, 4)]
    md = (swept / "report" / "report.md").read_text()
    assert "### System: RISE vs RISE-BM25 at gpt-5.4-mini / K=50 / sample" in md
    assert "### K: K=5 vs K=50 at RISE-BM25 / gpt-5.4-mini / sample" in md
    listed = next(t for t in md_tables(md) if t[0][0] == "Factor")
    assert [row[:4] for row in listed[1:]] == [
        ["System", "1. RISE", "3. RISE-BM25", "gpt-5.4-mini / K=5 / sample"],
        ["System", "2. RISE", "4. RISE-BM25", "gpt-5.4-mini / K=50 / sample"],
        ["K", "1. K=5", "2. K=50", "RISE / gpt-5.4-mini / sample"],
        ["K", "3. K=5", "4. K=50", "RISE-BM25 / gpt-5.4-mini / sample"],
    ]
    labels = [f"{i}. {s} / gpt-5.4-mini / K={k} / sample" for i, (s, k) in
              enumerate([("RISE", 5), ("RISE", 50), ("RISE-BM25", 5), ("RISE-BM25", 50)], 1)]  # fmt: skip
    tables = [t for t in md_tables(md) if t[0][0] == "Run"]  # spend, details, interaction: runs by what they are
    assert len(tables) == 3 and all([row[0] for row in table[1:5]] == labels for table in tables)


def test_spend_per_cell_and_for_the_sweep_in_every_output(swept: Path) -> None:
    state = json.loads((swept / "sweep.json").read_text())
    cells = {cid: spent_usd(swept / "cells" / cid) for cid in CELLS}  # the one figure of what a directory paid
    assert all(v > 0 for v in cells.values())
    for cid, total in cells.items():
        spend = state["cells"][cid]["spent"]
        assert spend["spent_usd"] == pytest.approx(total)
        assert spend["agents_usd"] > 0 and spend["judge_usd"] > 0
        assert spend["agents_usd"] + spend["judge_usd"] == pytest.approx(total)
    assert state["spent_usd"] == pytest.approx(sum(cells.values()), abs=1e-6)
    assert state["spent"]["judge_usd"] == pytest.approx(
        sum(state["cells"][c]["spent"]["judge_usd"] for c in CELLS), abs=1e-6
    )
    report = json.loads((swept / "report" / "report.json").read_text())
    assert report["spent"]["spent_usd"] == pytest.approx(state["spent_usd"], abs=1e-6)
    md = (swept / "report" / "report.md").read_text()
    spend = next(t for t in md_tables(md) if t[0][:3] == ["Run", "Queries", "Agents $"])
    assert spend[0] == ["Run", "Queries", "Agents $", "Judge $", "Spent $ (total)", "$/query agents",
                        "$/query with judge"]  # fmt: skip
    total_row = spend[-1]
    assert total_row[:2] == ["All runs", "16"] and total_row[4] == f"${state['spent_usd']:.4f}"
    assert total_row[6] == f"${state['spent_usd'] / 16:.4f}" and total_row[5] != total_row[6]  # the judge counted
    page = (swept / "report" / "report.html").read_text()
    assert f"<td>All runs</td><td>16</td><td>{total_row[2]}</td>" in page


def test_report_html_keeps_wide_tables_in_boxes_that_scroll(swept: Path) -> None:
    """At 1,400 px the interaction table and the query table are wider than the window: each scrolls inside its
    own box, and the labels of runs stay on one line (checked on the page's structure and its stylesheet)."""
    page = (swept / "report" / "report.html").read_text()
    tables = re.findall(r"(.{0,30})<table class='summary'>", page)
    assert len(tables) >= 6 and all(before.endswith("<div class='scroll'>") for before in tables)
    css = re.search(r"<style>(.*?)</style>", page, re.S).group(1)
    assert re.search(r"\.scroll, #queries \{ overflow-x: auto;", css)
    assert "white-space: nowrap; }" in re.search(r"table\.queries th \{[^}]*\}", css).group(0)  # one-line heads
    assert "table.summary td { white-space: nowrap; }" in css and re.search(
        r"td\.c-run[^{]*\{ white-space: nowrap", css
    )


def test_report_command_prints_a_summary_not_report_md(swept: Path, tmp_path: Path, capsys) -> None:
    dirs = [str(swept / "cells" / c) for c in CELLS]
    assert main(["report", *dirs, "--out", str(tmp_path / "r")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 + 3  # a line per cell, the comparisons, the spend, where the files went
    assert lines[0].startswith("1. RISE / gpt-5.4-mini / K=5 / sample: accuracy ")
    assert lines[4] == "paired comparisons: 4 (System 2, K 2)"
    assert lines[5].startswith("spent: $") and lines[6].startswith(f"report: wrote {tmp_path / 'r' / 'report.md'}")
    assert "# RISE evaluation report" not in "\n".join(lines)


def test_pairs_of_a_three_factor_grid_differ_in_one_factor_each() -> None:
    grid = [
        {"system": s, "model": m, "k": k, "corpus": "c", "repeat": r}
        for s in ("rise", "dci")
        for m in ("mini", "nano")
        for k in (5, 50)
        for r in (0, 1)
    ]
    pairs = factor_pairs(grid)
    per_repeat = 3 * 4  # per factor: one pair at each of the 4 settings of the two others
    assert len(pairs) == 2 * per_repeat
    for p in pairs:
        a, b = grid[p.a], grid[p.b]
        assert [key for key in ("system", "model", "k", "corpus", "repeat") if a[key] != b[key]] == [p.factor]
    assert [p.factor for p in pairs] == ["system"] * 8 + ["model"] * 8 + ["k"] * 8


def test_runs_two_factors_apart_are_not_compared_and_the_report_says_so(tmp_path: Path, capsys) -> None:
    from tests.eval.helpers import judgment, trajectory, write_run

    def run(name: str, system: str, model: str) -> Path:
        t = [trajectory(f"q{i}", system=system, model=model, exact_answer="a", answer="a") for i in range(3)]
        return write_run(tmp_path / name, t, {f"q{i}": judgment(i > 0) for i in range(3)})

    a, b = run("a", "rise", "gpt-5.4-mini"), run("b", "rise-bm25", "gpt-5.4-nano")
    assert main(["report", str(a), str(b), "--out", str(tmp_path / "out")]) == 0
    assert json.loads((tmp_path / "out" / "report.json").read_text())["paired"] == []
    md = (tmp_path / "out" / "report.md").read_text()
    assert "No two of these runs differ in exactly one factor" in md and "| Metric |" not in md
    assert "paired comparisons" not in capsys.readouterr().out
