"""Benchmark of report.html at scale: 2 runs (rise, rise-bm25) x 1,000 queries x 100 steps, opened in Chromium.

Writes two synthetic run directories (trajectories with 100 tool calls each, outputs of realistic length, the
events.jsonl the engine would log, judgments), builds the report (`write_report`, timed), then loads report.html in
a real headless Chromium (tests/browser.py) and reads two marks the page sets itself: `first-view-ms` (from
navigation start to the query table drawn, filters included) and, with #q=ID, `trajectory-ms` (to both
trajectories of that query drawn side by side). The Chromium process's wall time (start-up included) is reported
apart. Target: the first view under 2 s. A screenshot of each view is left in the work directory.

    python bench/report_html.py [--queries 1000] [--steps 100] [--output-chars 800] [--repeats 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rise_batch.eval.report import write_report  # noqa: E402
from tests.browser import dump_dom, screenshot  # noqa: E402

TOOLS = ("search", "bash", "read")


def step(rng: random.Random, i: int, chars: int) -> tuple[dict, str]:
    tool = TOOLS[0] if i % 10 == 0 else rng.choice(TOOLS[1:])
    args = {"search": {"queries": [f"sub-query {i}"]}, "bash": {"command": f"rg -n 'term {i}' | head"},
            "read": {"path": f"doc{i}.txt", "start": 1, "end": 40}}[tool]  # fmt: skip
    body = " ".join(rng.choice(("alpha", "beta", "gamma", "delta", "epsilon")) for _ in range(chars // 6))
    body = body[: max(chars, 200)]
    if tool == "search":
        body += f"\n\nWorkspace: {100 * (i // 10 + 1):,} documents (+100 this call)."
    return {"tool": tool, "arguments": args, "output": body}, tool


def write_run(root: Path, system: str, queries: int, steps: int, chars: int, seed: int) -> Path:
    rng = random.Random(seed)
    (root / "trajectories").mkdir(parents=True)
    (root / "judgments").mkdir()
    meta = {"system": system, "model": "gpt-5.4-mini", "config_hash": "h", "k": 1000}
    (root / "run.json").write_text(json.dumps(meta))
    with (root / "events.jsonl").open("w") as events:
        for q in range(queries):
            qid = f"q{q:04d}"
            made = [step(rng, i, rng.randint(chars // 2, chars * 3 // 2)) for i in range(steps)]
            events.write(json.dumps({"t": q, "event": "start", "query_id": qid, "attempt": 1}) + "\n")
            for i, (_, tool) in enumerate(made):
                e = {"event": "model_call", "call": i + 1, "tool_calls": [tool], "input_tokens": 1000 + 300 * i,
                     "output_tokens": 60, "seconds": 0.8}  # fmt: skip
                events.write(json.dumps({"t": q + i / 1000, "query_id": qid, "attempt": 1} | e) + "\n")
                e = {"event": "tool_call", "tool": tool, "seconds": 0.05}
                events.write(json.dumps({"t": q + i / 1000 + 1e-4, "query_id": qid, "attempt": 1} | e) + "\n")
            right = rng.random() < 0.6
            t = {"query_id": qid, "query": f"Which synthetic fact number {q} is true?", "system": system,
                 "model": meta["model"], "config_hash": "h", "final_text": "Exact Answer: a\nConfidence: 80%",
                 "exact_answer": "a" if right else "b", "confidence": 80.0, "answer": "a",
                 "stop_reason": rng.choice(("answered",) * 8 + ("max_calls", "wall_clock")),
                 "model_calls": steps + 1, "tool_calls": {k: sum(1 for _, t in made if t == k) for k in TOOLS},
                 "usage": {"input_tokens": 10**6, "cached_input_tokens": 0, "output_tokens": 6000},
                 "cost_usd": rng.uniform(0.05, 0.3), "elapsed_s": 90.0, "workspace_docs": 1000,
                 "retrieved_docids": [f"d{q}"], "surfaced_docids": [], "gold_doc_ids": [f"d{q}"],
                 "steps": [s for s, _ in made], "error": None}  # fmt: skip
            (root / "trajectories" / f"{qid}.json").write_text(json.dumps(t))
            j = {"query_id": qid, "correct": right, "method": "llm", "confidence": 80, "cost_usd": 0.001}
            (root / "judgments" / f"{qid}.json").write_text(json.dumps(j))
    return root


def marks(dom: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r'data-(first-view|trajectory)-ms="(\d+)"', dom)}


def load(url: str, repeats: int) -> dict[str, float | None]:
    walls, first, traj = [], [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        m = marks(dump_dom(url))
        walls.append(time.perf_counter() - t0)
        first.append(m.get("first-view"))
        traj.append(m.get("trajectory"))
    med = lambda xs: statistics.median(xs) if None not in xs else None  # noqa: E731
    return {"first_view_ms": med(first), "trajectory_ms": med(traj), "chromium_wall_s": round(med(walls), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--output-chars", type=int, default=800, help="mean characters of a tool output (max 2,000 kept)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "report_html.json"))
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rise-bench-html-"))
    t0 = time.perf_counter()
    runs = [write_run(work / s, s, a.queries, a.steps, a.output_chars, i) for i, s in enumerate(("rise", "rise-bm25"))]
    made_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    write_report(runs, work / "report")
    report_s = time.perf_counter() - t0
    page = work / "report" / "report.html"
    data = list((work / "report" / "report_html" / "traj").rglob("*.js"))
    qid = f"q{a.queries // 2:04d}"
    result = {
        "bench": "report_html",
        "host": {"python": platform.python_version(), "machine": platform.machine(), "load_1m": os.getloadavg()[0]},
        "queries": a.queries,
        "runs": 2,
        "steps": a.steps,
        "output_chars_mean": a.output_chars,
        "synthetic_runs_s": round(made_s, 1),
        "write_report_s": round(report_s, 1),
        "report_html_bytes": page.stat().st_size,
        "trajectory_files": len(data),
        "trajectory_file_bytes_mean": int(statistics.mean(p.stat().st_size for p in data)),
        "first_view": load(page.as_uri(), a.repeats),
        "open_trajectory": load(page.as_uri() + "#q=" + quote(qid), a.repeats),
        "screenshots": [
            str(screenshot(page.as_uri(), work / "first_view.png")),
            str(screenshot(page.as_uri() + "#q=" + quote(qid), work / "trajectory.png")),
        ],  # fmt: skip
        "target_first_view_ms": 2000,
    }
    result["first_view_under_target"] = (result["first_view"]["first_view_ms"] or 10**9) < 2000
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
