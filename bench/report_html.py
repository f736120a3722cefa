"""report.html at scale: runs of synthetic trajectories, the report built and timed, the page opened in Chromium.

Writes `--runs` synthetic run directories (rise, rise-bm25, ...; trajectories with `--steps` tool calls each,
outputs of realistic length, the per-step records the engine keeps for the interaction metrics, bash commands that
differ from query to query, the events.jsonl it would log, judgments), builds the report (`write_report`, timed:
it reads and checks every run file, computes every query's interaction metrics and writes one data file per
trajectory), then loads report.html in Chromium (tests/browser.py) and reads two marks the page sets itself:
`first-view-ms` (from navigation start to the query table drawn and laid out, filters included) and, with #q=ID,
`trajectory-ms` (to both trajectories of that query drawn side by side). The Chromium process's wall time
(start-up included) is reported apart. Target: the first view under 2 s (bench/targets.yaml).

Before and after, in the same run: the bash commands of every trajectory split by shlex (the old path) and by
eval/shell_words.py, and with `--before` the whole report built once more the old way (shlex, one process).
The work directory (runs, report, a screenshot of each view) is removed at the end unless `--work` names one to keep.

    python -m bench.report_html [--runs 2] [--queries 1000] [--steps 100] [--output-chars 800] [--repeats 3]
    python -m bench.report_html --runs 1 --queries 10000 --steps 50 --before --no-browser
"""

from __future__ import annotations

import argparse
import json
import random
import re
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

from bench.common import Run, load_average

TOOLS = ("search", "bash", "read")
WORDS = ("alpha", "beta", "gamma", "delta", "epsilon")


def step(rng: random.Random, q: int, i: int, chars: int) -> dict:
    """Tool call i of query q as agent/loop.py records it: every 10th a search adding 100 documents (the gold
    document arrives with the second, shown in the third's preview and read at step 25), else rg or a read."""
    tool = TOOLS[0] if i % 10 == 0 else "read" if i == 25 else rng.choice(TOOLS[1:])
    gold = f"gold{q}.txt"
    args = {"search": {"queries": [f"sub-query {i}"]}, "bash": {"command": f"rg -n 'term {i}' | head"},
            "read": {"path": gold if i == 25 else f"doc{i}.txt", "offset": 0, "limit": 40}}[tool]  # fmt: skip
    if tool == "bash":  # commands as agents write them, different in every query (no cache hit across queries)
        args["command"] = rng.choice((f"rg -n -i '{rng.choice(WORDS)} {q} {i}' . | head -n 20",
                                      f'cat "doc{q}_{i}.txt" | sed -n \'1,40p\'',
                                      f"grep -c \"{rng.choice(WORDS)}\" doc{i}.txt gold{q}.txt 2>/dev/null",
                                      f"ls | wc -l && rg -l 'q{q} step {i}' | head"))  # fmt: skip
    body = " ".join(rng.choice(WORDS) for _ in range(chars // 6))[: max(chars, 200)]
    surfaced = [f"d{q}"] if (tool == "search" and i == 20) or (tool == "read" and i == 25) else [f"x{q}_{i}"]
    if tool == "read":  # numbered lines and the read tool's trailer
        text = [f"{n:>6}\t{body[k : k + 60]}" for n, k in enumerate(range(0, len(body), 60), 1)]
        body = "\n".join([*text, f"[lines 1-{len(text)} of 300; {300 - len(text)} more lines: continue with offset]"])
    if tool == "search":
        body += f"\n\nWorkspace: {100 * (i // 10 + 1):,} documents (+100 this call)."
    lines = body.count("\n") + 1
    return {"tool": tool, "arguments": args, "output": body, "surfaced": surfaced if tool != "bash" else [],
            "added": 100 if tool == "search" else 0, "output_lines": lines}  # fmt: skip


def write_run(root: Path, system: str, queries: int, steps: int, chars: int, seed: int) -> Path:
    rng = random.Random(seed)
    (root / "trajectories").mkdir(parents=True)
    (root / "judgments").mkdir()
    meta = {"system": system, "model": "gpt-5.4-mini", "config_hash": "h", "k": 1000}
    (root / "run.json").write_text(json.dumps(meta))
    with (root / "events.jsonl").open("w") as events:
        for q in range(queries):
            qid = f"q{q:04d}"
            made = [step(rng, q, i, rng.randint(chars // 2, chars * 3 // 2)) for i in range(steps)]
            events.write(json.dumps({"t": q, "event": "start", "query_id": qid, "attempt": 1}) + "\n")
            for i, s in enumerate(made):
                e = {"event": "model_call", "call": i + 1, "tool_calls": [s["tool"]], "input_tokens": 1000 + 300 * i,
                     "output_tokens": 60, "seconds": 0.8}  # fmt: skip
                events.write(json.dumps({"t": q + i / 1000, "query_id": qid, "attempt": 1} | e) + "\n")
                e = {"event": "tool_call", "tool": s["tool"], "seconds": 0.05}
                events.write(json.dumps({"t": q + i / 1000 + 1e-4, "query_id": qid, "attempt": 1} | e) + "\n")
            right = rng.random() < 0.6
            retrieved = [f"r{q}_{n}" for n in range(150)] + [f"d{q}"] + [f"r{q}_{n}" for n in range(150, 999)]
            t = {"query_id": qid, "query": f"Which synthetic fact number {q} is true?", "system": system,
                 "model": meta["model"], "config_hash": "h", "final_text": "Exact Answer: a\nConfidence: 80%",
                 "exact_answer": "a" if right else "b", "confidence": 80.0, "answer": "a",
                 "stop_reason": rng.choice(("answered",) * 8 + ("max_calls", "wall_clock")),
                 "model_calls": steps + 1, "tool_calls": {k: sum(1 for s in made if s["tool"] == k) for k in TOOLS},
                 "usage": {"input_tokens": 10**6, "cached_input_tokens": 0, "output_tokens": 6000},
                 "cost_usd": rng.uniform(0.05, 0.3), "elapsed_s": 90.0, "workspace_docs": 1000,
                 "retrieved_docids": retrieved, "surfaced_docids": [f"d{q}"], "gold_doc_ids": [f"d{q}"],
                 "gold_paths": {f"d{q}": f"gold{q}.txt"}, "steps": made, "error": None}  # fmt: skip
            (root / "trajectories" / f"{qid}.json").write_text(json.dumps(t))
            j = {"query_id": qid, "correct": right, "method": "llm", "confidence": 80, "cost_usd": 0.001}
            (root / "judgments" / f"{qid}.json").write_text(json.dumps(j))
    return root


def marks(dom: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r'data-(first-view|trajectory)-ms="(\d+)"', dom)}


def load(url: str, repeats: int) -> dict[str, float | None]:
    """Median over `repeats` fresh Chromium processes of the page's own marks, and of the process's wall."""
    from tests.browser import dump_dom

    walls, first, traj, loads = [], [], [], []
    for _ in range(repeats):
        loads.append(load_average()[0])
        t0 = time.perf_counter()
        m = marks(dump_dom(url))
        walls.append(time.perf_counter() - t0)
        first.append(m.get("first-view"))
        traj.append(m.get("trajectory"))

    def med(xs: list) -> float | None:
        return statistics.median(xs) if None not in xs else None

    return {"first_view_ms": med(first), "trajectory_ms": med(traj), "chromium_wall_s": round(med(walls), 2),
            "runs_ms": {"first_view": first, "trajectory": traj}, "load_1m": loads}  # fmt: skip


def split_commands(runs: list[Path]) -> dict[str, float | int]:
    """Every bash command of the runs split by shlex (the old path) and by shell_words (cache cleared), timed."""
    from rise_batch.eval.shell_words import shell_words, shlex_words

    commands = []
    for root in runs:
        for f in (root / "trajectories").glob("*.json"):
            steps = json.loads(f.read_bytes())["steps"]
            commands += [s["arguments"]["command"] for s in steps if s["tool"] == "bash"]
    t0 = time.perf_counter()
    old = [shlex_words(c) for c in commands]
    shlex_s = time.perf_counter() - t0
    shell_words.cache_clear()
    t0 = time.perf_counter()
    new = [shell_words.__wrapped__(c) for c in commands]
    new_s = time.perf_counter() - t0
    assert old == new
    return {"commands": len(commands), "shlex_s": round(shlex_s, 2), "shell_words_s": round(new_s, 2),
            "shlex_us_per_command": round(1e6 * shlex_s / len(commands), 1),
            "shell_words_us_per_command": round(1e6 * new_s / len(commands), 1)}  # fmt: skip


def cpu_s() -> float:
    """CPU seconds of this process and its finished children (the forked workers): a figure a loaded machine
    stretches less than the wall time."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def report_the_old_way(runs: list[Path], out: Path) -> float:
    """write_report with the bash commands split by shlex and every trajectory done in this process (the path
    before eval/shell_words.py and eval/forkmap.py); seconds."""
    from rise_batch.eval import forkmap, interaction
    from rise_batch.eval.report import write_report
    from rise_batch.eval.shell_words import shlex_words

    saved = interaction.shell_words, forkmap.MIN_ITEMS
    interaction.shell_words, forkmap.MIN_ITEMS = shlex_words, 1 << 62
    try:
        t0 = time.perf_counter()
        write_report(runs, out)
        return time.perf_counter() - t0
    finally:
        interaction.shell_words, forkmap.MIN_ITEMS = saved


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.report_html", description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=2, help="runs (systems rise, rise-bm25, then rise-2, ...)")
    ap.add_argument("--queries", type=int, default=1000, help="queries per run")
    ap.add_argument("--steps", type=int, default=100, help="tool calls per trajectory")
    ap.add_argument("--output-chars", type=int, default=800, help="mean characters of a tool output (max 2,000 kept)")
    ap.add_argument("--repeats", type=int, default=3, help="Chromium loads per view (the median is reported)")
    ap.add_argument("--before", action="store_true", help="also build the report the old way (shlex, one process)")
    ap.add_argument("--no-browser", action="store_true", help="time the report only, open no Chromium")
    ap.add_argument(
        "--work", type=Path, help="work directory to keep (runs, report, screenshots); default: a temporary one"
    )
    ap.add_argument("--out", help="results file (default bench/results/report_html.json)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from rise_batch.eval.report import write_report
    from tests.browser import screenshot

    run = Run("report_html", args)
    work = args.work or Path(tempfile.mkdtemp(prefix="rise-bench-html-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        t0 = time.perf_counter()
        systems = [("rise", "rise-bm25")[i] if i < 2 else f"rise-{i}" for i in range(args.runs)]
        runs = [write_run(work / s, s, args.queries, args.steps, args.output_chars, i) for i, s in enumerate(systems)]
        made_s = time.perf_counter() - t0
        import matplotlib  # imported before the clocks start, so neither build pays for it

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot  # noqa: F401

        for f in (f for root in runs for f in root.rglob("*") if f.is_file()):
            f.read_bytes()  # in the page cache for both builds: the first would otherwise pay the disk's reads
        load_before = load_average()
        t0, c0 = time.perf_counter(), cpu_s()
        write_report(runs, work / "report")
        report_s, report_cpu = time.perf_counter() - t0, cpu_s() - c0
        page = work / "report" / "report.html"
        data = list((work / "report" / "report_html" / "traj").rglob("*.js"))
        traj_url = page.as_uri() + "#q=" + quote(f"q{args.queries // 2:04d}")
        figures = {
            "trajectories": args.runs * args.queries,
            "steps": args.steps,
            "synthetic_runs_s": round(made_s, 1),
            "write_report_s": round(report_s, 1),
            "write_report_cpu_s": round(report_cpu, 1),
            "write_report_load_1m": [load_before[0], load_average()[0]],
            "report_json_bytes": (work / "report" / "report.json").stat().st_size,
            "report_html_bytes": page.stat().st_size,
            "trajectory_files": len(data),
            "trajectory_file_bytes_mean": int(statistics.mean(p.stat().st_size for p in data)),
            "split_commands": split_commands(runs),
        }
        if args.before:
            c0 = cpu_s()
            figures["write_report_old_way_s"] = round(report_the_old_way(runs, work / "report-old"), 1)
            figures["write_report_old_way_cpu_s"] = round(cpu_s() - c0, 1)
            figures["write_report_old_way_load_1m"] = load_average()[0]
        if not args.no_browser:
            figures["first_view"] = load(page.as_uri(), args.repeats)
            figures["open_trajectory"] = load(traj_url, args.repeats)
        if args.work and not args.no_browser:
            figures["screenshots"] = [
                str(screenshot(page.as_uri(), work / "first_view.png")),
                str(screenshot(traj_url, work / "trajectory.png")),
            ]
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(figures, indent=1))
    run.write(figures, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
