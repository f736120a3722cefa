"""`report` on run directories that fight back: a run file or events line whose fields have the wrong types is
skipped with one warning naming it, and the report is written, never a traceback; values from run files are
escaped in report.md, so a tool name, a model or a run directory cannot start a heading, break a table or load a
remote image. Every case goes through the real `rise-batch report` command on real run directories."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt

from rise_batch.eval.report_md import md_code, md_text

REPO = Path(__file__).resolve().parents[2]


def good(qid):
    steps = [
        {
            "tool": "search",
            "arguments": {"queries": ["x"]},
            "output": "p/a.txt\n\nWorkspace: 2 documents (+2 this call).",
            "surfaced": ["d1"],
            "added": 2,
            "output_lines": 3,
        },
        {
            "tool": "bash",
            "arguments": {"command": "cat p/a.txt | head -n 3"},
            "output": "l1\nl2",
            "surfaced": ["d1"],
            "added": 0,
            "output_lines": 2,
        },
        {
            "tool": "read",
            "arguments": {"path": "p/a.txt"},
            "output": "     1\tx\n[lines 1-1 of 1]",
            "surfaced": ["d1"],
            "added": 0,
            "output_lines": 2,
        },
    ]
    return {
        "query_id": qid,
        "query": "q?",
        "system": "rise",
        "model": "gpt-5.4-nano",
        "config_hash": "h",
        "final_text": "Exact Answer: a\nConfidence: 80%",
        "exact_answer": "a",
        "confidence": 80.0,
        "answer": "a",
        "stop_reason": "answered",
        "model_calls": 3,
        "tool_calls": {"search": 1, "bash": 1, "read": 1},
        "usage": {"input_tokens": 10, "cached_input_tokens": 0, "output_tokens": 5},
        "cost_usd": 0.01,
        "elapsed_s": 1.0,
        "workspace_docs": 2,
        "retrieved_docids": ["d0", "d1"],
        "surfaced_docids": ["d1"],
        "gold_doc_ids": ["d1"],
        "gold_paths": {"d1": "p/a.txt"},
        "steps": steps,
        "calls": [
            {"call": 1, "text": "hi", "tool_calls": 1},
            {"call": 2, "tool_calls": 1},
            {"call": 3, "tool_calls": 1},
            {"call": 4, "text": "done", "tool_calls": 0},
        ],
        "error": None,
    }


def events(qid):
    ev = [{"t": 0, "event": "start", "query_id": qid, "attempt": 1}]
    for i, tool in enumerate(("search", "bash", "read")):
        ev.append(
            {
                "t": i + 0.1,
                "event": "model_call",
                "query_id": qid,
                "attempt": 1,
                "call": i + 1,
                "tool_calls": [tool],
                "input_tokens": 10,
                "output_tokens": 5,
                "seconds": 0.1,
            }
        )
        ev.append({"t": i + 0.2, "event": "tool_call", "query_id": qid, "attempt": 1, "tool": tool, "seconds": 0.1})
    return ev


JUDG = {"correct": True, "method": "llm", "confidence": 80, "cost_usd": 0.001}
T_FIELDS = {  # field -> forged values
    "query_id": [["x"], {"a": 1}],
    "usage": ["lots", [1, 2], {"input_tokens": "x"}],
    "gold_paths": [["p/a.txt"], {"d1": 1}, "s"],
    "gold_doc_ids": ["d1", [["d1"]], {"d1": 1}],
    "retrieved_docids": [{"d": 1}, 5, [["d"]]],
    "surfaced_docids": [7, [{"a": 1}]],
    "steps": [{"a": 1}, ["s"], "x"],
    "calls": [{"a": 1}, [{"call": ["x"]}], [{"call": 1, "text": ["t"]}], [{"call": 1, "tool_calls": "x"}], ["c"]],
    "tool_calls": [["bash"], {"bash": "x"}, "s"],
    "model_calls": ["x", [1]],
    "cost_usd": ["x", [1], {"a": 1}],
    "workspace_docs": ["x", [1]],
    "elapsed_s": ["x", {"a": 1}],
    "confidence": ["high", [1]],
    "stop_reason": [["answered"], {"a": 1}],
    "final_text": [["x"], 5],
    "exact_answer": [["a"], {"a": 1}, 5],
    "system": [["rise"], {"a": 1}],
    "model": [["m"]],
    "cancelled_calls": ["x"],
    "config_hash": [["h"]],
    "answer": [["a"]],
    "query": [["q"]],
    "error": [["e"]],
}
STEP_FIELDS = {
    "surfaced": [[["d1"]], "d1", {"d": 1}],
    "arguments": [["x"], {"command": ["cat"]}, {"path": ["x"]}],
    "tool": [["bash"], {"a": 1}],
    "added": ["x", 1.5],
    "output_lines": ["x", [1]],
    "output": [["x"], {"a": 1}],
}
J_FIELDS = {
    "correct": ["yes", [1]],
    "cost_usd": ["x", [1]],
    "confidence": ["x", [1]],
    "method": [["llm"], {"a": 1}],
    "usage": ["x"],
    "trajectory_key": [["k"]],
    "unjudged": [[1]],
}
E_FIELDS = {
    "t": ["late", [1], {"a": 1}],
    "query_id": [["q1"], {"a": 1}],
    "attempt": [[1], {"a": 1}],
    "event": [["model_call"], {"a": 1}],
    "call": [["x"], {"a": 1}],
    "tool_calls": [5, "search", {"a": 1}],
    "input_tokens": ["x", [1]],
    "seconds": ["x", [1]],
    "output_tokens": [{"a": 1}],
}
META = {
    "run.json": [
        {"config_hash": ["h"]},
        {"k": [1]},
        {"system": ["x"]},
        {"model": {"a": 1}},
        {"gold": [1]},
        {"corpus_docs": "x"},
        {"k": "x"},
    ],
    "cell.json": [[1, 2], "x", {"corpus_docs": "x"}, {"k": [1]}, {"repeat": {"a": 1}}],
}


def cases() -> list[tuple[str, tuple[str, Any, Any]]]:
    return list(_cases())


def _cases():
    for kind, table in (("traj", T_FIELDS), ("step", STEP_FIELDS), ("judg", J_FIELDS), ("event", E_FIELDS)):
        for f, vals in table.items():
            yield from ((f"{kind}.{f}={json.dumps(v)}", (kind, f, v)) for v in vals)
    for line in ("[1,2]", "5", '"s"', "\xff\xfe", "{bad"):
        yield f"event line {line!r}", ("eline", None, line)
    for name, vals in META.items():
        yield from ((f"{name}={json.dumps(v)}", ("meta", name, v)) for v in vals)


def make(root: Path, case) -> Path:
    kind, f, v = case
    (root / "trajectories").mkdir(parents=True)
    (root / "judgments").mkdir()
    run = {"system": "rise", "model": "gpt-5.4-nano", "config_hash": "h", "k": 1000}
    if kind == "meta" and f == "run.json":
        run |= v
    (root / "run.json").write_text(json.dumps(run))
    if kind == "meta" and f == "cell.json":
        (root / "cell.json").write_text(json.dumps(v))
    ev = []
    for qid in ("q0", "q1"):
        t, j, e = good(qid), dict(JUDG, query_id=qid), events(qid)
        if qid == "q1":
            if kind == "traj":
                t[f] = v
            if kind == "step":
                t["steps"][1][f] = v
            if kind == "judg":
                j[f] = v
            if kind == "event":
                e[1][f] = v
                e[2][f] = v
        (root / "trajectories" / f"{qid}.json").write_text(json.dumps(t))
        (root / "judgments" / f"{qid}.json").write_text(json.dumps(j))
        ev += [json.dumps(x) for x in e]
    if kind == "eline":
        ev.insert(3, v)
    (root / "events.jsonl").write_bytes(
        ("\n".join(ev) + "\n").encode("utf-8", "surrogateescape")
        if kind != "eline"
        else ("\n".join(ev) + "\n").encode("latin-1")
    )
    return root


def report(out: Path, *runs: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "rise_batch.cli", "report", *map(str, runs), "--out", str(out)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, stdin=subprocess.DEVNULL)


GROUPS = ("traj", "step", "judg", "event", "eline", "meta")
# Fields whose reader checks the type where it uses the value, so the file is kept: a `correct` that is no boolean
# is no verdict (unjudged), a confidence that is no number is not one, a text that is no string is not shown as
# one, an argument that is no string names no file; the query, gold answer and error are only shown (as data).
LENIENT = ('traj.calls=[{"call": 1, "text"', "traj.cancelled_calls", "traj.answer=", "traj.query=", "traj.error=")
LENIENT += ("step.arguments={", "judg.correct", "judg.confidence", "judg.usage", "judg.trajectory_key", "judg.unjudged")


@pytest.mark.parametrize("group", GROUPS)
def test_forged_run_files_are_skipped_with_a_warning_naming_each(tmp_path: Path, group: str) -> None:
    """Each forged run directory holds a good query q0 beside a forged q1 (or a forged events line, run.json,
    cell.json): the report is written over all of them at once, q0 of every run is reported, and stderr names each
    forged file once."""
    made = [(name, case) for name, case in cases() if case[0] == group]
    runs = [make(tmp_path / f"c{i}", case) for i, (_, case) in enumerate(made)]
    done = report(tmp_path / "out", *runs)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    summaries = json.loads((tmp_path / "out" / "report.json").read_text())["runs"]
    md = (tmp_path / "out" / "report.md").read_text()
    for (name, (kind, _, _)), run, s in zip(made, runs, summaries, strict=True):
        forged = {
            "traj": run / "trajectories" / "q1.json",
            "step": run / "trajectories" / "q1.json",
            "judg": run / "judgments" / "q1.json",
            "event": run / "events.jsonl",
            "eline": run / "events.jsonl",
            "meta": run / ("cell.json" if name.startswith("cell.json") else "run.json"),
        }[kind]
        warned = [line for line in done.stderr.splitlines() if f"skipped {forged}:" in line]
        queries = {r["query_id"] for r in s["per_query"]}
        if name.startswith(LENIENT):
            assert not warned and not s["unreadable_files"] and queries == {"q0", "q1"}, name
            continue
        assert len(warned) == 1, (name, done.stderr[-2000:])
        assert any(str(forged) in line for line in s["unreadable_files"]), name
        assert f"skipped {md_text(forged)}" in md, name
        assert queries == ({"q0"} if kind in ("traj", "step") else {"q0", "q1"}), name
        assert s["n_judged"] == (1 if kind in ("traj", "step", "judg") else 2), name


def test_a_good_run_directory_is_reported_without_a_warning(tmp_path: Path) -> None:
    run = make(tmp_path / "good", ("meta", "run.json", {}))
    done = report(tmp_path / "out", run)
    assert done.returncode == 0 and "skipped" not in done.stderr and "Warning" not in done.stdout
    assert len(cases()) >= 36  # the forged cases above


HOSTILE = "a|b\n# heading ![x](http://127.0.0.1:9/i.png) <img src=http://127.0.0.1:9/j.png> [l](http://e.x) `c` *e*"


def rendered(md: str) -> str:
    return MarkdownIt("commonmark").enable("table").render(md)


def test_values_from_run_files_are_escaped_in_report_md(tmp_path: Path) -> None:
    """A tool name, a stop reason, a model and a run directory holding `|`, a newline, `# heading`, an image and
    raw HTML: report.md renders (markdown-it, CommonMark with tables) with its own headings only, no image or link
    but its figures, no raw HTML, every table row with the head's cells, and each value shown as written (its
    line breaks as spaces)."""
    run = tmp_path / "run\n# heading"
    make(run, ("meta", "run.json", {}))
    for q in ("q0", "q1"):
        path = run / "trajectories" / f"{q}.json"
        t = json.loads(path.read_text())
        t["tool_calls"] = {HOSTILE: 2, "bash": 1}
        t["model"] = HOSTILE
        t["stop_reason"] = HOSTILE
        path.write_text(json.dumps(t))
    done = report(tmp_path / "out", run)
    assert done.returncode == 0, done.stderr
    md = (tmp_path / "out" / "report.md").read_text()
    html = rendered(md)
    headings = [line for line in md.splitlines() if line.startswith("#")]
    assert all(h.startswith(("# RISE evaluation report", "## ")) for h in headings), headings
    assert html.count("<h1>") == 1 and "<h1>heading" not in html and "<h2>heading" not in html
    assert "<img" in html and all("127.0.0.1" not in img for img in html.split("<img")[1:] if "src=" in img[:80])
    assert "<a href" not in html and "<img src=http" not in html and "<em>" not in html
    shown = HOSTILE.replace("\n", " ")
    text = html.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"').replace("&amp;", "&")
    assert f"{shown} mean" in text and shown in text and "run # heading" in text
    for table in html.split("<table>")[1:]:
        head = table.split("</thead>")[0].count("<th>")
        body = table.split("<tbody>")[1].split("</tbody>")[0] if "<tbody>" in table else ""
        assert all(row.count("<td>") == head for row in body.split("<tr>")[1:]), table[:400]


def test_md_code_and_md_text_keep_a_value_whole() -> None:
    for value in ("a`b", "``x``", "`", "plain", "a\nb|c"):
        html = rendered(md_code(value))
        assert "<code>" in html and "\n" not in md_code(value)
    assert rendered("| " + md_text("x|y") + " |\n|---|\n").count("<th>") == 1
    assert rendered(md_text("# h", line_start=True)).startswith("<p>")
    assert rendered(md_text("1. item", line_start=True)).startswith("<p>")
    assert rendered(md_text("- item", line_start=True)).startswith("<p>")


def test_a_run_file_holding_lone_surrogates_is_reported_with_replacement_characters(tmp_path: Path) -> None:
    """`\\ud800` escaped in a trajectory's JSON (no character; no UTF-8 holds it) used to end the report in a
    traceback when the page's data file was written; it is read as U+FFFD (a real pair stays one character)."""
    run = make(tmp_path / "run", ("meta", "run.json", {}))
    path = run / "trajectories" / "q1.json"
    t = json.loads(path.read_text())
    t["final_text"] = "a \ud800 b \U0001f600"
    t["steps"][1]["output"] = "\udfff"
    path.write_text(json.dumps(t))  # ensure_ascii: the lone surrogates as \ud800 escapes
    done = report(tmp_path / "out", run)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    data = (tmp_path / "out" / "report_html" / "traj" / "0" / "1.js").read_text()
    assert "a \ufffd b \U0001f600" in data and '"output":"\ufffd"' in data
