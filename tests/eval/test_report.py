"""report.md / report.json / PNGs from hand-built run directories and an eval-retrieval result."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from rise_batch.cli import main
from rise_batch.eval.plots import pareto_front
from rise_batch.eval.report import write_report
from tests.eval.helpers import judgment, known_run, trajectory, write_run

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def assert_png(path: Path) -> None:
    """A real PNG: the signature, then an IHDR chunk with a non-zero size, then more than a header's worth."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, path
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    width, height = struct.unpack(">II", data[16:24])
    assert width > 100 and height > 100
    assert len(data) > 5000 and data[-8:-4] == b"IEND"


def sweep_runs(root: Path) -> list[Path]:
    """2 systems x 2 K x 2 corpus sizes, accuracy rising with K, costs apart per system."""
    runs = []
    for system, base, cost in (("rise", 2, 0.02), ("rise-bm25", 1, 0.01)):
        for k in (100, 1000):
            for corpus, docs in (("100k", 100_000), ("1m", 1_000_000)):
                right = base + (k == 1000) + (docs == 100_000)
                t = [
                    trajectory(
                        f"q{i}",
                        system=system,
                        exact_answer="a",
                        answer="a",
                        cost_usd=cost,
                        tool_calls={"search": i + 1, "read": 2},
                    )
                    for i in range(4)
                ]
                j = {f"q{i}": judgment(i < right, confidence=50) for i in range(4)}
                d = write_run(root / f"{system}-{k}-{corpus}", t, j, system=system, k=k)
                (d / "cell.json").write_text(json.dumps({"corpus": corpus, "corpus_docs": docs, "repeat": 0}))
                runs.append(d)
    return runs


def test_report_of_two_runs_and_a_retrieval_result(tmp_path: Path, capsys) -> None:
    a = known_run(tmp_path / "a")
    b = write_run(
        tmp_path / "b",
        [trajectory("q1", system="dci", exact_answer="x", answer="x", tool_calls={"bash": 4}, cost_usd=0.3)],
        {"q1": judgment(True, "exact")},
        system="dci",
    )
    retrieval = tmp_path / "bm25.json"
    retrieval.write_text(
        json.dumps({"summary": {"n_queries": 3, "n_skipped_no_gold": 1, "recall": {"10": 0.5, "100": 0.75}}})
    )
    out = tmp_path / "report"
    assert main(["report", str(a), str(b), "--out", str(out), "--retrieval", str(retrieval)]) == 0
    md = (out / "report.md").read_text()
    head = "| System | Model | Accuracy % [95% CI] (judged/queries) | Unjudged | No-answers | Tool calls | $/query "
    head += "| $/query with judge | gold_R % |"
    assert head + " cov_mean % |" in md
    assert "| RISE | gpt-5.4-nano | 40.0 [" in md
    assert "| RISE | gpt-5.4-nano | 40.0 [11.8, 76.9] (5/5) | 0 | 2/5 | 5.2 | $0.0170 | $0.0176 | 75.0 | 37.5 |" in md
    assert "| DCI | gpt-5.4-nano | 100.0 [20.7, 100.0] (1/1) | 0 | 0/1 | 4.0 | $0.300 | $0.300 | – | – |" in md
    assert "max_calls 1, wall_clock 1" in md
    assert "| 50.0 | 75.0 |" in md  # recall@10, recall@100
    printed = capsys.readouterr().out.splitlines()  # a short summary, not report.md: a line per run, the files
    assert printed[0].startswith("1. RISE / gpt-5.4-nano / K=1000: accuracy 40.0% [11.8, 76.9] (5/5 judged)")
    assert printed[1].startswith("2. DCI / gpt-5.4-nano / K=1000: accuracy 100.0%") and "spent $0.3000" in printed[1]
    assert printed[-1].startswith(f"report: wrote {out / 'report.md'}, {out / 'report.html'}, report.json")
    assert printed[2:4] == ["paired comparisons: 1 (System 1)", "spent: $0.3880 (agents $0.3850, judge $0.0030)"]
    report = json.loads((out / "report.json").read_text())
    assert [r["system"] for r in report["runs"]] == ["rise", "dci"]
    assert report["runs"][0]["accuracy"] == 0.4 and report["retrieval"][0]["name"] == "bm25"
    names = sorted(Path(p).name for p in report["plots"])
    assert names == ["accuracy_vs_cost.png", "recall_bm25.png", "tool_calls.png"]  # no sweep: no K/size plots
    for p in report["plots"]:
        assert_png(Path(p))
        assert f"]({Path(p).name})" in md


def test_sweep_report_draws_k_and_corpus_size_plots(tmp_path: Path) -> None:
    runs = sweep_runs(tmp_path / "runs")
    report = write_report(runs, tmp_path / "out")
    names = sorted(Path(p).name for p in report["plots"])
    assert names == ["accuracy_vs_corpus_size.png", "accuracy_vs_cost.png", "accuracy_vs_k.png", "tool_calls.png"]
    for p in report["plots"]:
        assert_png(Path(p))
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| RISE (K=1000) · 100k | gpt-5.4-nano | 100.0 [51.0, 100.0] (4/4) |" in md
    assert "| RISE-BM25 (K=100) · 1m | gpt-5.4-nano | 25.0 [" in md


def test_pareto_front() -> None:
    pts = [(0.1, 30.0), (0.2, 25.0), (0.3, 50.0), (0.05, 10.0), (0.3, 40.0)]
    assert pareto_front(pts) == [3, 0, 2]


def test_retrieval_only_report_from_a_real_eval_retrieval_run(tmp_path: Path, capsys) -> None:
    from tests.agent.helpers import title_query, world, write_queries

    w = world()
    queries = write_queries(tmp_path / "q.jsonl", [title_query(d, t) for d, t in list(w.titles.items())[:5]])
    results = tmp_path / "bm25_sample.json"
    argv = ["eval-retrieval", "--index", str(w.index), "--queries", str(queries), "--k", "1,5,20"]
    assert main([*argv, "--out", str(results)]) == 0
    recall = json.loads(results.read_text())["summary"]["recall"]
    assert main(["report", "--retrieval", str(results), "--out", str(tmp_path / "r")]) == 0
    md = (tmp_path / "r" / "report.md").read_text()
    assert "## Retrieval only" in md and "### bm25_sample" in md and "5 queries with gold documents" in md
    assert "| recall@1 % | recall@5 % | recall@20 % |" in md
    assert "| " + " | ".join(f"{100 * recall[k]:.1f}" for k in ("1", "5", "20")) + " |" in md
    assert "| System |" not in md  # no runs given
    assert_png(tmp_path / "r" / "recall_bm25_sample.png")
    capsys.readouterr()


def test_report_json_keeps_per_query_rows(tmp_path: Path) -> None:
    report = write_report([known_run(tmp_path / "a")], tmp_path / "out")
    rows = {r["query_id"]: r for r in report["runs"][0]["per_query"]}
    assert rows["q1"] == {
        "query_id": "q1",
        "correct": True,
        "unjudged": False,
        "method": "exact",
        "stop_reason": "answered",
        "model_calls": 7,
        "tool_calls": 6,
        "agent_usd": 0.01,
        "judge_usd": 0.0,
        "gold_R": 1.0,
        "cov": 0.5,
        # a hand-built trajectory without steps: nothing entered, was shown or read
        "gold_in_workspace_step": None,
        "gold_surfaced_step": None,
        "gold_read": False,
        "gold_lines_read": 0,
        "lines_read": 0,
        "toc_lines_read": 0,
        "search_calls": 0,
        "workspace_docs_final": 3,
        "gold_surfaced_steps": [],
        "gold_read_steps": [],
        "workspace_growth": [],
    }
    assert rows["q5"]["gold_R"] is None and rows["q3"]["method"] == "empty"


def test_the_frontier_line_the_legend_names_is_drawn() -> None:
    """Two runs where the cheaper one is also more accurate: the frontier is one point, and was drawn as a
    zero-length line (invisible) while the legend still named it. It must be a visible staircase to the costliest run,
    and a single run (nothing to compare) gets neither a line nor a legend entry."""
    from rise_batch.eval.plots import frontier_figure

    runs = [
        {"system": "rise", "model": "m", "accuracy": 0.6, "agent_usd_per_query": 0.01},
        {"system": "dci", "model": "m", "accuracy": 0.4, "agent_usd_per_query": 0.05},
    ]
    fig = frontier_figure(runs)
    ax = fig.axes[0]
    lines = [ln for ln in ax.get_lines() if ln.get_label() == "frontier"]
    assert len(lines) == 1 and "frontier" in [t.get_text() for t in ax.get_legend().get_texts()]
    fig.canvas.draw()
    path = lines[0].get_path().transformed(lines[0].get_transform())  # in pixels, as drawn
    xs = path.vertices[:, 0]
    assert xs.max() - xs.min() > 50  # a visible line from the cheaper run to the costlier one's cost
    assert list(lines[0].get_xdata()) == [0.01, 0.05] and list(lines[0].get_ydata()) == [60.0, 60.0]

    single = frontier_figure(runs[:1]).axes[0]
    assert not [ln for ln in single.get_lines() if ln.get_label() == "frontier"]
    assert "frontier" not in [t.get_text() for t in single.get_legend().get_texts()]
