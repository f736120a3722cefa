"""report's honest intervals at small n and the paired comparison of two runs, on hand-built run directories;
and end to end: `run` rise and rise-bm25 on the sample against the fake server, `judge`, then `report A B`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rise_batch.cli import main
from rise_batch.eval.report import write_report
from tests.eval.helpers import judgment, trajectory, write_run
from tests.real_parts import require_bwrap


def test_one_judged_query_of_eight_is_not_reported_as_certain(tmp_path: Path) -> None:
    t = [trajectory(f"q{i}", exact_answer="a", answer="a") for i in range(8)]
    run = write_run(tmp_path / "run", t, {"q0": judgment(True)})
    report = write_report([run], tmp_path / "out")
    r = report["runs"][0]
    assert (r["n_judged"], r["n_queries"], r["accuracy"]) == (1, 8, 1.0)
    assert r["accuracy_ci95"] == pytest.approx((0.2065, 1.0), abs=1e-4) and r["too_many_unjudged"] is True
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| 100.0 [20.7, 100.0] (1/8) |" in md and "100.0 [100.0, 100.0]" not in md
    assert "**Warning:** run 1 (RISE): 7 of 8 queries have no verdict (more than 10%)" in md


def test_paired_table_of_two_runs_over_the_same_queries(tmp_path: Path) -> None:
    def run(name: str, right: set[int], cost: float) -> Path:
        t = [trajectory(f"q{i}", exact_answer="a", answer="a", cost_usd=cost, model_calls=2) for i in range(4)]
        return write_run(tmp_path / name, t, {f"q{i}": judgment(i in right) for i in range(4)})

    a, b = run("a", {0, 1, 2}, 0.01), run("b", {0, 3}, 0.03)
    assert main(["report", str(a), str(b), "--out", str(tmp_path / "out")]) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    [p] = report["paired"]
    assert (p["n_common"], p["only_a_correct"], p["only_b_correct"], p["both_correct"]) == (4, 2, 1, 1)
    rows = {r["metric"]: r for r in p["rows"]}
    assert rows["accuracy"]["diff"] == pytest.approx(-0.25) and rows["accuracy"]["n"] == 4
    lo, hi = rows["accuracy"]["diff_ci95"]
    assert lo < -0.25 < hi
    assert rows["cost_per_query"]["diff"] == pytest.approx(0.02)
    assert rows["cost_per_correct"]["a"] == pytest.approx(0.04 / 3) and rows["cost_per_correct"]["b"] == 0.06
    assert rows["model_calls"]["diff"] == 0 and rows["gold_read_rate"]["n"] == 0  # no gold: no rate
    md = (tmp_path / "out" / "report.md").read_text()
    assert "## Paired comparison" in md and "| Accuracy % | 4 | 75.0 | 50.0 | -25.0 [" in md
    assert "only A right 2, only B right 1, both 1, neither 0" in md


def test_run_judge_report_end_to_end_has_a_consistent_interaction_block(tmp_path: Path) -> None:
    from rise_batch.fake_llm import FakeLLMServer
    from tests.agent.helpers import run_dir, title_query, world, write_queries

    require_bwrap()
    w = world()
    out = run_dir("interaction-e2e")
    queries = write_queries(out / "q.jsonl", [title_query(d, t) for d, t in list(w.titles.items())[:4]])
    runs = [out / "rise", out / "rise-bm25"]
    with FakeLLMServer() as s:
        for system, run in zip(("rise", "rise-bm25"), runs, strict=True):
            argv = ["run", "--queries", str(queries), "--system", system, "--index", str(w.index), "--docs"]
            argv += [str(w.docs), "--out", str(run), "--base-url", s.base_url, "--workers", "0"]
            assert main([*argv, "--index-backend", "numpy", "--tpm", "100000000", "--rpm", "1000000"]) == 0
            assert main(["judge", str(run), "--model", "gpt-5.4-mini", "--base-url", s.base_url]) == 0
    assert main(["report", *map(str, runs), "--out", str(out / "report")]) == 0
    report = json.loads((out / "report" / "report.json").read_text())
    for r in report["runs"]:
        m, rows = r["interaction"], r["per_query"]
        assert m["n_queries"] == m["n_with_gold"] == len(rows) == 4
        assert m["gold_read"]["k"] == sum(1 for q in rows if q["gold_read"]) and m["gold_read"]["n"] == 4
        assert m["gold_in_workspace_step"]["reached"] == sum(1 for q in rows if q["gold_in_workspace_step"] is not None)
        assert m["search_calls"]["median"] == 1 and all(q["workspace_growth"][0][0] == 0 for q in rows)
        for q in rows:  # each figure agrees with the others and with gold_R (from the search union)
            assert q["gold_read"] == bool(q["gold_read_steps"]) == (q["gold_lines_read"] > 0)
            assert (q["gold_in_workspace_step"] is not None) == (q["gold_R"] > 0)
            if q["gold_read"]:
                assert q["gold_surfaced_step"] <= q["gold_read_steps"][0] and q["gold_lines_read"] <= q["lines_read"]
            assert q["workspace_docs_final"] == q["workspace_growth"][-1][1]
        assert any(q["gold_read"] for q in rows)  # the scripted agent found and read some
    rise, bm25 = (r["interaction"]["toc_lines_read"]["median"] for r in report["runs"])
    assert rise > 0 and bm25 == 0  # only RISE's files have tables of contents
    assert report["paired"][0]["n_common"] == 4 and [x["metric"] for x in report["paired"][0]["rows"]][0] == "accuracy"
    md = (out / "report" / "report.md").read_text()
    assert "## Interaction space" in md and "## Paired comparison" in md
    assert (out / "report" / "gold_in_workspace_step.png").is_file()
