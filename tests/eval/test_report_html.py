"""report.html in a real headless Chromium: every query listed, a trajectory opened from the URL, side by side
over two runs, interaction highlights, hostile text shown as text, a screenshot that is not blank."""

from __future__ import annotations

import html
import json
import re
import threading
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pytest

from rise_batch.agent.job import run_trajectories
from rise_batch.eval.report import write_report
from rise_batch.eval.report_html import js_json, render_html
from rise_batch.eval.report_rows import report_blocks
from rise_batch.eval.trajectory_view import trajectory_view
from rise_batch.fake_llm import FakeLLMServer
from rise_batch.fake_llm.agent import AgentResponder
from rise_batch.fake_llm.chat import FallbackResponder
from tests.agent.helpers import read_trajectories, run_config, run_dir, title_query, world, write_queries
from tests.browser import dump_dom, screenshot
from tests.eval.helpers import judgment, known_run, trajectory, write_run
from tests.real_parts import require_bwrap

EVIL = "</script><img src=x onerror=\"document.title='pwned'\">&amp;"


def steps(qid: str, traced: bool = True) -> list[dict]:
    """Four tool calls as agent/loop.py records them: the gold document d1 (a.txt) is linked by the first search,
    shown in the second's preview and read by the last call; without `traced`, as a trajectory written before the
    per-step records (no surfaced docids, no counts)."""
    made = [
        {"tool": "search", "arguments": {"queries": [f"first call of {qid}"]}, "surfaced": ["o1"], "added": 40,
         "output": "  1. [3.10] o1.txt\n\nWorkspace: 40 documents (+40 this call). Explore it with bash"},
        {"tool": "search", "arguments": {"queries": ["second"]}, "surfaced": ["d1"], "added": 10,
         "output": "  1. [2.50] a.txt\n\nWorkspace: 50 documents (+10 this call). Explore it with bash"},
        {"tool": "bash", "arguments": {"command": "rg -n Paris"}, "output": "x" * 1500, "surfaced": [], "added": 0},
        {"tool": "read", "arguments": {"path": "a.txt"}, "surfaced": ["d1"], "added": 0,
         "output": "     1\tParis\n     2\tis a city\n[lines 1-2 of 2; end of file]"},
    ]  # fmt: skip
    for s in made:
        s["output_lines"] = s["output"].count("\n") + 1
    return made if traced else [{k: s[k] for k in ("tool", "arguments", "output")} for s in made]


def traced(qid: str, **fields: Any) -> dict:
    """A trajectory over steps(): gold d1 is the 5th document of the first search's 40."""
    retrieved = [f"o{i}" for i in range(1, 5)] + ["d1"] + [f"o{i}" for i in range(5, 50)]
    return trajectory(qid, steps=steps(qid), tool_calls={"search": 2, "bash": 1, "read": 1}, retrieved_docids=retrieved,
                      gold_doc_ids=["d1"], gold_paths={"d1": "a.txt"}, workspace_docs=50, **fields)  # fmt: skip


def events(qid: str) -> list[dict]:
    """What the engine logs for steps(): 2 model calls with tools (search, search; bash + read), then the answer."""
    out = [{"event": "start", "query_id": qid, "attempt": 1, "t": 1.0}]
    out += [{"event": "model_call", "query_id": qid, "attempt": 1, "t": 2.0, "call": 1, "tool_calls": ["search"] * 2,
             "input_tokens": 1000, "output_tokens": 50, "seconds": 1.5}]  # fmt: skip
    out += [{"event": "tool_call", "query_id": qid, "attempt": 1, "t": t, "tool": "search", "seconds": 0.25}
            for t in (3.0, 3.5)]  # fmt: skip
    out += [{"event": "model_call", "query_id": qid, "attempt": 1, "t": 4.0, "call": 2,
             "tool_calls": ["bash", "read"], "input_tokens": 3000, "output_tokens": 50, "seconds": 2.0}]  # fmt: skip
    out += [{"event": "tool_call", "query_id": qid, "attempt": 1, "t": t, "tool": "x", "seconds": 0.5} for t in (5, 6)]
    out += [{"event": "model_call", "query_id": qid, "attempt": 1, "t": 7.0, "call": 3, "tool_calls": [],
             "input_tokens": 4000, "output_tokens": 100, "seconds": 1.0}]  # fmt: skip
    return out


def two_runs(root: Path) -> list[Path]:
    """known_run's five queries, and a RISE-BM25 run over the same queries with traced steps and events, q5 left
    unjudged (20%: the run is flagged) and a model call of q3 cut at the wall clock (its cost a lower bound)."""
    a = known_run(root / "rise")
    t = [traced(f"q{i}", system="rise-bm25", exact_answer="x", answer="x", cost_usd=0.02, cancelled_calls=i == 3)
         for i in range(1, 6)]  # fmt: skip
    b = write_run(root / "bm25", t, {f"q{i}": judgment(i % 2 == 0) for i in range(1, 5)}, system="rise-bm25")
    (b / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for i in range(1, 6) for e in events(f"q{i}")))
    return [a, b]


def url(page: Path, qid: str | None = None) -> str:
    return page.as_uri() + ("" if qid is None else "#q=" + quote(qid, safe=""))


def text(s: str) -> str:
    """`s` as Chromium serialises a text node."""
    return html.escape(s, quote=False)


STEP = re.compile(r'<div class="(step[^"]*)"><div class="step-head"><b class="tool">(\w+)</b> #(\d+)')


def test_every_query_listed_and_a_trajectory_opens_side_by_side(tmp_path: Path) -> None:
    write_report(two_runs(tmp_path / "runs"), tmp_path / "out")
    page = tmp_path / "out" / "report.html"
    assert sorted(p.name for p in (tmp_path / "out" / "report_html" / "traj" / "1").iterdir())[0] == "0.js"
    dom = dump_dom(url(page))
    table = dom[dom.index('id="queries"') :]
    for i in range(1, 6):
        assert f'<td class="c-qid">q{i}</td>' in table
    assert "1. RISE / gpt-5.4-nano" in table and "2. RISE-BM25 / gpt-5.4-nano" in table  # as the sections name them
    assert "10 of 10 rows" in dom and "| System | Model" not in dom and "<td>RISE</td>" in dom  # summary table
    assert "data:image/png;base64," in dom  # figures inline: the page needs nothing beside it but report_html/
    viewer = dump_dom(url(page, "q2"))
    viewer = viewer[viewer.index('id="viewer"') :]
    assert viewer.count('class="traj"') == 2  # the two runs side by side
    assert text('{"queries":["first call of q2"]}') in viewer  # the first tool call and its arguments
    assert "workspace 40 docs (+40)" in viewer and "workspace 50 docs (+10)" in viewer and "model call 2" in viewer
    assert "show all 1500 characters" in viewer and "x" * 1500 not in viewer  # shortened until expanded


def md_tables(md: str) -> list[list[list[str]]]:
    """report.md's tables, each a list of rows of cells (head first, the |---| line left out)."""
    tables, current = [], []
    for line in [*md.splitlines(), ""]:
        if line.startswith("|") and not line.startswith("|---"):
            current.append([c.strip() for c in line.strip().strip("|").split(" | ")])
        elif not line.startswith("|---") and current:
            tables, current = [*tables, current], []
    return tables


def test_the_page_shows_every_row_and_section_of_report_md(tmp_path: Path) -> None:
    """Each table of report.md, row for row and cell for cell, in report.html, with the unjudged warning, the
    interaction and paired sections and the gold-step plot."""
    write_report(two_runs(tmp_path / "runs"), tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text()
    dom = dump_dom(url(tmp_path / "out" / "report.html"))
    summary = dom[: dom.index('id="queries-title"')]
    tables = md_tables(md)
    assert len(tables) == 6  # main, spend, details, interaction space, the comparisons' list, the paired table
    for table in tables:
        head, *rows = table
        assert "<tr>" + "".join(f"<th>{text(c)}</th>" for c in head) + "</tr>" in summary, head
        for row in rows:
            assert "<tr>" + "".join(f"<td>{text(c)}</td>" for c in row) + "</tr>" in summary, row
    for heading in ("Spend", "Details", "Interaction space", "Paired comparisons", "Figures"):
        assert f"## {heading}" in md and f"<h2>{heading}</h2>" in summary
    assert "**Warning:** run 2 (RISE-BM25): 1 of 5 queries have no verdict" in md
    assert "<b>Warning:</b> run 2 (RISE-BM25): 1 of 5 queries have no verdict" in summary
    pair = "A = 1. RISE / gpt-5.4-nano / K=1000, B = 2. RISE-BM25 / gpt-5.4-nano / K=1000: 5 queries in both."
    assert pair in summary
    assert "<h3>System: RISE vs RISE-BM25 at gpt-5.4-nano / K=1000</h3>" in summary
    assert "| ≥ $0.0200 |" in md  # the cut call's lower-bound mark, in the page by the row check above
    assert "![gold_in_workspace_step](gold_in_workspace_step.png)" in md and 'alt="gold_in_workspace_step"' in summary


def test_interaction_highlights_follow_the_metrics_steps(tmp_path: Path) -> None:
    """The steps the viewer marks are those interaction.py computed (a step is its 0-based index in `steps`): gold
    linked by step 0, first shown at 1, read at 3; the same trajectory written before the per-step records has no
    gold steps and shows plain steps."""
    old = traced("q1") | {"steps": steps("q1", traced=False)}
    a = write_run(tmp_path / "new", [traced("q1", exact_answer="x", answer="x")], {"q1": judgment(True)})
    b = write_run(tmp_path / "old", [old], system="rise-bm25")
    report = write_report([a, b], tmp_path / "out")
    row = report["runs"][0]["per_query"][0]
    assert (row["gold_in_workspace_step"], row["gold_surfaced_steps"], row["gold_read_steps"]) == (0, [1, 3], [3])
    assert report["runs"][1]["per_query"][0]["gold_in_workspace_step"] is None
    dom = dump_dom(url(tmp_path / "out" / "report.html", "q1"))
    new, old_col = dom[dom.index('id="viewer"') :].split('class="traj"')[1:]
    assert STEP.findall(new) == [
        ("step gold-ws", "search", "0"),
        ("step gold-seen", "search", "1"),
        ("step ", "bash", "2"),
        ("step gold-seen2 gold-read", "read", "3"),
    ]
    assert [c for c, _, _ in STEP.findall(old_col)] == ["step "] * 4 and "rg -n Paris" in old_col
    assert "workspace 50 docs (+10)" in new and "workspace 50 docs (+10)" in old_col  # growth without records too
    table = dump_dom(url(tmp_path / "out" / "report.html"))
    cells = re.findall(r'<td class="c-(gold_ws|gold_seen|gold_read)">([^<]*)</td>', table)
    assert cells == [("gold_ws", "0"), ("gold_seen", "1"), ("gold_read", "yes")] + [(c, "–") for c, _ in cells[3:]]


def test_hostile_query_id_answer_and_output_render_as_text(tmp_path: Path) -> None:
    evil = trajectory(EVIL, exact_answer=EVIL, answer=EVIL, steps=[{"tool": "bash", "arguments": {"command": EVIL},
                      "output": EVIL}], final_text=EVIL, calls=[{"call": 1, "text": EVIL, "text_chars": 9,
                      "tool_calls": 1, "reasoning": EVIL}])  # fmt: skip
    run = write_run(tmp_path / "run", [trajectory("ok")], system="rise")
    (run / "trajectories" / "evil.json").write_text(json.dumps(evil))
    write_report([run], tmp_path / "out")
    page = tmp_path / "out" / "report.html"
    for dom in (dump_dom(url(page)), dump_dom(url(page, EVIL))):
        assert "<img" not in dom.replace("<img alt=", "")  # only the figures' images, none from the data
        assert "pwned" not in re.search(r"<title>(.*?)</title>", dom).group(1)
        assert text(EVIL) in dom
    viewer = dom[dom.index('id="viewer"') :]
    assert viewer.count(text(EVIL)) >= 9  # id, question, answer, gold, model text and reasoning, tool call, output,
    assert f'<pre class="model-said">{text(EVIL)}</pre>' in viewer  # final reply: all text; the model's before its call


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
    assert [len(turn["steps"]) for turn in view["turns"]] == [2, 2, 0]
    assert [s["step"] for turn in view["turns"] for s in turn["steps"]] == [0, 1, 2, 3]  # indexes in `steps`
    assert [turn["seconds"] for turn in view["turns"]] == [1.5, 2.0, 1.0]
    assert sum(turn["cost_usd"] for turn in view["turns"]) == pytest.approx(0.09)
    assert view["turns"][0]["steps"][0]["seconds"] == 0.25 and view["turns"][0]["steps"][0]["workspace"]["docs"] == 40
    bare = trajectory_view(t)
    assert [s["tool"] for turn in bare["turns"] for s in turn["steps"]] == ["search", "search", "bash", "read"]
    assert "step" not in t["steps"][0]  # the trajectory itself is not changed


def test_model_text_goes_before_its_calls_tool_steps() -> None:
    """The trajectory's `calls` put each call's text on its turn (with events, or grouping the steps without them);
    the answering call's text is the final reply and is not repeated."""
    said = [{"call": 1, "text": "two searches first", "text_chars": 18, "tool_calls": 2},
            {"call": 2, "text": "now read", "text_chars": 5000, "tool_calls": 2, "reasoning": "a.txt looks right"},
            {"call": 3, "text": "Exact Answer: x", "text_chars": 15, "tool_calls": 0}]  # fmt: skip
    t = trajectory("q1", steps=steps("q1"), calls=said, final_text="Exact Answer: x")
    for view in (trajectory_view(t, events("q1")[1:]), trajectory_view(t)):
        turns = view["turns"]
        assert [(turn["call"], len(turn["steps"])) for turn in turns] == [(1, 2), (2, 2), (3, 0)]
        assert [turn.get("text") for turn in turns] == ["two searches first", "now read", None]
        assert turns[1]["text_chars"] == 5000 and turns[1]["reasoning"] == "a.txt looks right"
        assert [s["step"] for turn in turns for s in turn["steps"]] == [0, 1, 2, 3]


def test_model_text_of_a_real_run_is_in_the_opened_trajectory(tmp_path: Path) -> None:
    """A real `run` (scripted agent over the fake server, real sandbox and index) whose model writes before each
    tool call: the trajectory file keeps each call's text, and report.html shows it in the opened trajectory,
    before the call's tool call, with the cut of a 2,500-character text said."""
    require_bwrap()
    docid, title = next(iter(world().titles.items()))
    out = run_dir("model-text")
    queries = write_queries(out / "q.jsonl", [title_query(docid, title, "[fake:say]"),
                                              title_query("long", title, "[fake:say=2500]")])  # fmt: skip
    release = threading.Event()
    with FakeLLMServer(responders=[AgentResponder(stop=release), FallbackResponder()]) as server:
        stats = run_trajectories(run_config(out / "run", queries, server.base_url))
        release.set()
    assert stats["stop_reasons"] == {"answered": 2}
    said = f"Turn 1: I call search to look for {title!r}."
    first = read_trajectories(out / "run")[docid]["calls"][0]
    assert first == {"call": 1, "text": said, "text_chars": len(said), "tool_calls": 1}
    write_report([out / "run"], tmp_path / "report")
    viewer = dump_dom(url(tmp_path / "report" / "report.html", docid))
    viewer = viewer[viewer.index('id="viewer"') :]
    assert viewer.index(text(said)) < viewer.index('<b class="tool">search</b> #0')  # before its tool call
    assert text(f"Turn 4: I call read to look for {title!r}.") in viewer
    long = dump_dom(url(tmp_path / "report" / "report.html", "long"))
    assert "cut: the trajectory file keeps 2000 of its 2500 characters" in long


def test_a_page_without_runs_holds_the_retrieval_table() -> None:
    result = {"summary": {"n_queries": 3, "recall": {"10": 0.5}}}
    page = render_html(report_blocks([], [("bm25", result)]), [], [], [])
    assert "<h3>bm25</h3>" in page and "<th>recall@10 %</th>" in page and "<td>50.0</td>" in page
