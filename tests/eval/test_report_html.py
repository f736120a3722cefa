"""report.html in a real headless Chromium: every query listed, a trajectory opened from the URL, side by side
over two runs, interaction highlights, hostile text shown as text, a screenshot that is not blank."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest

from rise_batch.eval.report import html_page, write_report
from rise_batch.eval.report_html import js_json, render_html, write_trajectories
from rise_batch.eval.trajectory_view import trajectory_view
from tests.browser import dump_dom, screenshot
from tests.eval.helpers import judgment, known_run, trajectory, write_run

EVIL = "</script><img src=x onerror=\"document.title='pwned'\">&amp;"


def steps(qid: str) -> list[dict]:
    return [
        {
            "tool": "search",
            "arguments": {"queries": [f"first call of {qid}"]},
            "output": "Workspace: 40 documents (+40 this call). Explore it with bash",
        },  # fmt: skip
        {"tool": "bash", "arguments": {"command": "rg -n Paris"}, "output": "x" * 1500},
        {"tool": "read", "arguments": {"path": "a.txt"}, "output": "line"},
    ]


def events(qid: str) -> list[dict]:
    """What the engine logs for steps(): 2 model calls with tools (search; bash + read), then the answer."""
    out = [{"event": "start", "query_id": qid, "attempt": 1, "t": 1.0}]
    out += [{"event": "model_call", "query_id": qid, "attempt": 1, "t": 2.0, "call": 1, "tool_calls": ["search"],
             "input_tokens": 1000, "output_tokens": 50, "seconds": 1.5}]  # fmt: skip
    out += [{"event": "tool_call", "query_id": qid, "attempt": 1, "t": 3.0, "tool": "search", "seconds": 0.25}]
    out += [{"event": "model_call", "query_id": qid, "attempt": 1, "t": 4.0, "call": 2,
             "tool_calls": ["bash", "read"], "input_tokens": 3000, "output_tokens": 50, "seconds": 2.0}]  # fmt: skip
    out += [{"event": "tool_call", "query_id": qid, "attempt": 1, "t": t, "tool": "x", "seconds": 0.5} for t in (5, 6)]
    out += [{"event": "model_call", "query_id": qid, "attempt": 1, "t": 7.0, "call": 3, "tool_calls": [],
             "input_tokens": 4000, "output_tokens": 100, "seconds": 1.0}]  # fmt: skip
    return out


def two_runs(root: Path) -> list[Path]:
    """known_run's five queries, and a RISE-BM25 run over the same queries with steps and events."""
    a = known_run(root / "rise")
    t = [trajectory(f"q{i}", system="rise-bm25", exact_answer="x", answer="x", steps=steps(f"q{i}"),
                    tool_calls={"search": 1, "bash": 1, "read": 1}, cost_usd=0.02) for i in range(1, 6)]  # fmt: skip
    b = write_run(root / "bm25", t, {f"q{i}": judgment(i % 2 == 0) for i in range(1, 6)}, system="rise-bm25")
    (b / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for i in range(1, 6) for e in events(f"q{i}")))
    return [a, b]


def url(page: Path, qid: str | None = None) -> str:
    return page.as_uri() + ("" if qid is None else "#q=" + quote(qid, safe=""))


def text(s: str) -> str:
    """`s` as Chromium serialises a text node."""
    return html.escape(s, quote=False)


def test_every_query_listed_and_a_trajectory_opens_side_by_side(tmp_path: Path) -> None:
    write_report(two_runs(tmp_path / "runs"), tmp_path / "out")
    page = tmp_path / "out" / "report.html"
    assert sorted(p.name for p in (tmp_path / "out" / "report_html" / "traj" / "1").iterdir())[0] == "0.js"
    dom = dump_dom(url(page))
    table = dom[dom.index('id="queries"') :]
    for i in range(1, 6):
        assert f'<td class="c-qid">q{i}</td>' in table
    assert "1. RISE · gpt-5.4-nano" in table and "2. RISE-BM25 · gpt-5.4-nano" in table
    assert "10 of 10 rows" in dom and "| System | Model" not in dom and "<td>RISE</td>" in dom  # summary table
    assert "data:image/png;base64," in dom  # figures inline: the page needs nothing beside it but report_html/
    viewer = dump_dom(url(page, "q2"))
    viewer = viewer[viewer.index('id="viewer"') :]
    assert viewer.count('class="traj"') == 2  # the two runs side by side
    assert text('{"queries":["first call of q2"]}') in viewer  # the first tool call and its arguments
    assert "workspace 40 docs (+40)" in viewer and "model call 2" in viewer and "show all 1500 characters" in viewer
    assert "x" * 1500 not in viewer  # shortened until expanded


def test_interaction_highlights_and_a_trajectory_without_them(tmp_path: Path) -> None:
    t = trajectory("q1", steps=steps("q1"), gold_doc_ids=["d1"])
    inter = {"gold_in_workspace_step": 1, "gold_surfaced_step": 1, "gold_read": True, "gold_read_steps": [3],
             "workspace_growth": [{"docs": 40, "added": 40}], "lines_read": 12}  # fmt: skip
    out = tmp_path / "out"
    rows = write_trajectories(out, 0, tmp_path, {"q1": t}, [{"query_id": "q1", "correct": True} | inter])
    rows += write_trajectories(out, 1, tmp_path, {"q1": t}, [{"query_id": "q1", "correct": False}])
    runs = [{"name": "with"}, {"name": "without"}]
    (out / "report.html").write_text(render_html([], [], [], runs, rows))
    dom = dump_dom(url(out / "report.html", "q1"))
    assert "Gold in ws @" in dom and dom.count('class="step gold-ws gold-seen"') == 1
    assert dom.count('class="step gold-read"') == 1 and "gold entered the workspace" in dom
    assert dom.count('class="traj"') == 2 and dom.count("rg -n Paris") == 2  # the one without: plain steps


def test_hostile_query_id_answer_and_output_render_as_text(tmp_path: Path) -> None:
    evil = trajectory(EVIL, exact_answer=EVIL, answer=EVIL, steps=[{"tool": "bash", "arguments": {"command": EVIL},
                      "output": EVIL}], final_text=EVIL)  # fmt: skip
    run = write_run(tmp_path / "run", [trajectory("ok")], system="rise")
    (run / "trajectories" / "evil.json").write_text(json.dumps(evil))
    write_report([run], tmp_path / "out")
    page = tmp_path / "out" / "report.html"
    for dom in (dump_dom(url(page)), dump_dom(url(page, EVIL))):
        assert "<img" not in dom.replace("<img alt=", "")  # only the figures' images, none from the data
        assert "pwned" not in re.search(r"<title>(.*?)</title>", dom).group(1)
        assert text(EVIL) in dom
    viewer = dom[dom.index('id="viewer"') :]
    assert viewer.count(text(EVIL)) >= 6  # id, question, answer, gold, tool call, output, final reply: all text


def test_screenshot_is_not_blank(tmp_path: Path) -> None:
    write_report(two_runs(tmp_path / "runs"), tmp_path / "out")
    png = screenshot(url(tmp_path / "out" / "report.html", "q1"), tmp_path / "shot.png")
    import matplotlib.pyplot as plt

    pixels = plt.imread(png)
    assert pixels.shape[0] >= 500 and pixels.shape[1] >= 500
    assert len(np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)) > 10


def test_data_is_escaped_for_a_script_element() -> None:
    s = js_json({"a": EVIL + "\u2028"})
    assert "<" not in s and ">" not in s and "\u2028" not in s and json.loads(s) == {"a": EVIL + "\u2028"}


def test_steps_take_time_and_cost_from_events_and_stay_whole_without_them() -> None:
    t = trajectory("q1", steps=steps("q1"), cost_usd=0.09, model="unpriced-model")
    view = trajectory_view(t, events("q1")[1:])
    assert [len(turn["steps"]) for turn in view["turns"]] == [1, 2, 0]
    assert [s["step"] for turn in view["turns"] for s in turn["steps"]] == [1, 2, 3]
    assert [turn["seconds"] for turn in view["turns"]] == [1.5, 2.0, 1.0]
    assert sum(turn["cost_usd"] for turn in view["turns"]) == pytest.approx(0.09)
    assert view["turns"][0]["steps"][0]["seconds"] == 0.25 and view["turns"][0]["steps"][0]["workspace"]["docs"] == 40
    bare = trajectory_view(t)
    assert [s["tool"] for turn in bare["turns"] for s in turn["steps"]] == ["search", "bash", "read"]
    assert "step" not in t["steps"][0]  # the trajectory itself is not changed


def test_html_page_without_runs_holds_the_retrieval_table() -> None:
    result = {"summary": {"n_queries": 3, "recall": {"10": 0.5}}}
    page = html_page([], [], [("bm25", result)], [])
    assert "<th>recall@10 %</th>" in page and "<td>50.0</td>" in page
