"""report.html at scale: runs of synthetic trajectories, the report built and timed, the page opened in Chromium.

Writes `--runs` synthetic run directories (rise, rise-bm25, ...; trajectories with `--steps` tool calls each,
outputs of realistic length, the per-step records the engine keeps for the interaction metrics, bash commands that
differ from query to query, the events.jsonl it would log, judgments), builds the report (`write_report`, timed:
it reads and checks every run file, computes every query's interaction metrics and writes one data file per
trajectory), then loads report.html in Chromium (tests/browser.py) and reads two marks the page sets itself:
`first-view-ms` (from navigation start to the query table drawn and laid out, filters included) and, with #q=ID,
`trajectory-ms` (to both trajectories of that query drawn side by side). The Chromium process's wall time
(start-up included) is reported apart. Target: the first view under 2 s (bench/targets.yaml).

With `--sweep [CONFIG]` the runs are the cells of a sweep (by default jobs/sweep_table1.yaml, the paper's Table 1:
4 systems x 3 models, 12 cells), laid out as `rise-batch sweep` writes them (OUT/cells/<cell>/ with cell.json; DCI's
cells search nothing) and reported by the sweep's own call (eval/sweep_runner.report_sweep): one report over every
cell, its cells paired along one factor at a time (eval/comparisons.py).

Before and after, in the same run: the bash commands of every trajectory split by shlex (the old path) and by
eval/shell_words.py; with `--code NAME=PATH` (another checkout, e.g. `git archive` of the commit before a change)
each checkout's `rise-batch report` over the same runs, in its own process, `--rounds` times in turn: wall and CPU
seconds (forked workers included) with the load average beside them, and whether its files equal this checkout's
byte for byte; with `--before` the whole report built once more the old way (shlex, one process).
The work directory (runs, report, a screenshot of each view) is removed at the end unless `--work` names one to keep
(a kept one's runs are reused by the next invocation).

    python -m bench.report_html [--runs 2] [--queries 1000] [--steps 100] [--output-chars 800] [--repeats 3]
    python -m bench.report_html --runs 1 --queries 10000 --steps 50 --before --no-browser
    python -m bench.report_html --sweep --queries 830 --steps 50 --no-browser --code before=../before --rounds 2
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import multiprocessing
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from bench.common import REPO, Run, load_average

TOOLS = ("search", "bash", "read")
TABLE1 = REPO / "jobs" / "sweep_table1.yaml"  # the paper's Table 1 grid: 4 systems x 3 models, 12 cells
WORDS = ("alpha", "beta", "gamma", "delta", "epsilon")


def step(rng: random.Random, q: int, i: int, chars: int, searches: bool = True) -> dict:
    """Tool call i of query q as agent/loop.py records it: every 10th a search adding 100 documents (the gold
    document arrives with the second, shown in the third's preview and read at step 25), else rg or a read. A
    system that does not search (DCI) runs an rg where the others search."""
    tool = (TOOLS[0] if searches else "bash") if i % 10 == 0 else "read" if i == 25 else rng.choice(TOOLS[1:])
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


def write_run(
    root: Path, system: str, queries: int, steps: int, chars: int, seed: int, cell: dict | None = None
) -> Path:
    """A run directory of `queries` synthetic trajectories; with `cell` (a sweep cell's labels) laid out as the
    sweep writes a cell: its model, K and corpus in run.json and cell.json."""
    rng = random.Random(seed)
    (root / "trajectories").mkdir(parents=True)
    (root / "judgments").mkdir()
    meta = {"system": system, "model": "gpt-5.4-mini", "config_hash": "h", "k": 1000}
    if cell:
        meta |= {"model": cell["model"], "k": cell["k"], "corpus": cell["corpus"]}
        (root / "cell.json").write_text(json.dumps(cell))
    searches = cell is None or cell["k"] is not None
    (root / "run.json").write_text(json.dumps(meta))
    with (root / "events.jsonl").open("w") as events:
        for q in range(queries):
            qid = f"q{q:04d}"
            made = [step(rng, q, i, rng.randint(chars // 2, chars * 3 // 2), searches) for i in range(steps)]
            events.write(json.dumps({"t": q, "event": "start", "query_id": qid, "attempt": 1}) + "\n")
            for i, s in enumerate(made):
                e = {"event": "model_call", "call": i + 1, "tool_calls": [s["tool"]], "input_tokens": 1000 + 300 * i,
                     "output_tokens": 60, "seconds": 0.8}  # fmt: skip
                events.write(json.dumps({"t": q + i / 1000, "query_id": qid, "attempt": 1} | e) + "\n")
                e = {"event": "tool_call", "tool": s["tool"], "seconds": 0.05}
                events.write(json.dumps({"t": q + i / 1000 + 1e-4, "query_id": qid, "attempt": 1} | e) + "\n")
            right = rng.random() < 0.6
            retrieved = [f"r{q}_{n}" for n in range(150)] + [f"d{q}"] + [f"r{q}_{n}" for n in range(150, 999)]
            retrieved = retrieved if searches else []
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


def sweep_cells(config: Path, out: Path) -> tuple[Any, list[tuple[Path, dict]]]:
    """The sweep of `config` with its `out` moved to `out`, and each cell's run directory and labels (cell.json),
    in the grid's order, as `rise-batch sweep` lays them out."""
    from rise_batch.eval.sweep import cell_dir, expand, load_sweep_config

    cfg = dataclasses.replace(load_sweep_config(config), out=str(out))
    return cfg, [(Path(cell_dir(cfg, c)), c.labels()) for c in expand(cfg)]


def make_runs(args: argparse.Namespace, work: Path) -> tuple[Any, list[Path]]:
    """The synthetic runs, written by a process per core: `--runs` run directories, or with `--sweep` every cell of
    the sweep (its config, the run directories under work/sweep/cells/)."""
    if args.sweep:
        cfg, cells = sweep_cells(args.sweep, work / "sweep")
        jobs = [(d, c["system"], args.queries, args.steps, args.output_chars, i, c) for i, (d, c) in enumerate(cells)]
    else:
        cfg, systems = None, [("rise", "rise-bm25")[i] if i < 2 else f"rise-{i}" for i in range(args.runs)]
        jobs = [(work / s, s, args.queries, args.steps, args.output_chars, i, None) for i, s in enumerate(systems)]
    made = [job[0] for job in jobs if (job[0] / "trajectories").is_dir()]  # a kept --work's runs, taken as they are
    with multiprocessing.get_context("fork").Pool(os.cpu_count() or 1) as pool:
        pool.starmap(write_run, [job for job in jobs if job[0] not in made])
    return cfg, [job[0] for job in jobs]


def build_with(code: Path, runs: list[Path], out: Path) -> dict[str, Any]:
    """`rise-batch report RUNS --out OUT` of the checkout at `code`, in its own process (the same write_report call
    the sweep makes): wall seconds, CPU seconds (its forked workers included) and the load average around it."""
    shutil.rmtree(out, ignore_errors=True)
    load0, c0, t0 = load_average()[0], children_cpu_s(), time.perf_counter()
    cmd = [sys.executable, "-m", "rise_batch.cli", "report", *map(str, runs), "--out", str(out)]
    done = subprocess.run(cmd, env=os.environ | {"PYTHONPATH": str(code)}, cwd=code, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, children_cpu_s() - c0
    if done.returncode != 0:
        raise RuntimeError(f"report ({code}) exited {done.returncode}:\n{done.stderr[-3000:]}")
    return {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "load_1m": [load0, load_average()[0]]}


def children_cpu_s() -> float:
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return kids.ru_utime + kids.ru_stime


def tree_digests(out: Path) -> dict[str, str]:
    """Every file a report wrote, by path below `out`: its SHA-256, with `out` itself (named in report.md's and
    report.json's figure paths) written as OUT, so two builds into different directories compare."""
    placeholder = str(out).encode()
    return {
        str(f.relative_to(out)): hashlib.sha256(f.read_bytes().replace(placeholder, b"OUT")).hexdigest()
        for f in sorted(out.rglob("*"))
        if f.is_file()
    }


def compare_codes(args: argparse.Namespace, runs: list[Path], work: Path) -> dict[str, Any]:
    """Each checkout of `--code` and this one (`--name`) builds the report of the same runs, `--rounds` times in
    turn (the order rotated each round, so the machine's load falls on each alike); whether each wrote the same
    files as this checkout, byte for byte."""
    codes = {args.name: REPO} | {k: Path(v).resolve() for k, v in (c.split("=", 1) for c in args.code)}
    builds: dict[str, list[dict[str, Any]]] = {name: [] for name in codes}
    names = list(codes)
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            builds[name].append(build_with(codes[name], runs, work / f"report-{name}"))
            print(json.dumps({"round": r, "code": name, **builds[name][-1]}), flush=True)
    mine = tree_digests(work / f"report-{args.name}")
    same = {}
    for name in names[1:]:
        theirs = tree_digests(work / f"report-{name}")
        differ = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
        same[name] = {"files": len(theirs), "differ": len(differ), "first_differing": differ[:5]}
    return {"codes": {k: str(v) for k, v in codes.items()}, "builds": builds, "output_vs_" + args.name: same}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.report_html", description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=2, help="runs (systems rise, rise-bm25, then rise-2, ...)")
    ap.add_argument(
        "--sweep",
        type=Path,
        nargs="?",
        const=TABLE1,
        help="instead of --runs, one run per cell of this sweep config (default: the paper's Table 1 grid, 12 cells), "
        "laid out and reported as `rise-batch sweep` does",
    )
    ap.add_argument("--queries", type=int, default=1000, help="queries per run")
    ap.add_argument("--steps", type=int, default=100, help="tool calls per trajectory")
    ap.add_argument("--output-chars", type=int, default=800, help="mean characters of a tool output (max 2,000 kept)")
    ap.add_argument("--repeats", type=int, default=3, help="Chromium loads per view (the median is reported)")
    ap.add_argument("--before", action="store_true", help="also build the report the old way (shlex, one process)")
    ap.add_argument("--code", action="append", default=[], help="NAME=PATH of another checkout to compare")
    ap.add_argument("--name", default="after", help="this checkout's name beside --code's")
    ap.add_argument("--rounds", type=int, default=1, help="builds of each checkout with --code, in turn")
    ap.add_argument("--no-browser", action="store_true", help="time the report only, open no Chromium")
    ap.add_argument(
        "--work",
        type=Path,
        help="work directory to keep (runs, report, screenshots; runs already in it are reused as they are, so give "
        "it the same shape again); default: a temporary one",
    )
    ap.add_argument("--out", help="results file (default bench/results/report_html.json)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from rise_batch.eval.report import write_report
    from rise_batch.eval.sweep_runner import report_sweep
    from tests.browser import screenshot

    run = Run("report_html", args)
    work = (args.work or Path(tempfile.mkdtemp(prefix="rise-bench-html-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    try:
        t0 = time.perf_counter()
        cfg, runs = make_runs(args, work)
        made_s = time.perf_counter() - t0
        import matplotlib  # imported before the clocks start, so neither build pays for it

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot  # noqa: F401

        for f in (f for root in runs for f in root.rglob("*") if f.is_file()):
            f.read_bytes()  # in the page cache for both builds: the first would otherwise pay the disk's reads
        report_dir = work / "sweep" / "report" if cfg else work / "report"
        shutil.rmtree(report_dir, ignore_errors=True)
        load_before = load_average()
        t0, c0 = time.perf_counter(), cpu_s()
        report_sweep(cfg) if cfg else write_report(runs, report_dir)  # the sweep's own call for a sweep
        report_s, report_cpu = time.perf_counter() - t0, cpu_s() - c0
        page = report_dir / "report.html"
        data = list((report_dir / "report_html" / "traj").rglob("*.js"))
        traj_url = page.as_uri() + "#q=" + quote(f"q{args.queries // 2:04d}")
        figures = {
            "runs": len(runs),
            "trajectories": len(runs) * args.queries,
            "steps": args.steps,
            "synthetic_runs_s": round(made_s, 1),
            "write_report_s": round(report_s, 1),
            "write_report_cpu_s": round(report_cpu, 1),
            "write_report_load_1m": [load_before[0], load_average()[0]],
            "report_json_bytes": (report_dir / "report.json").stat().st_size,
            "report_html_bytes": page.stat().st_size,
            "trajectory_files": len(data),
            "trajectory_file_bytes_mean": int(statistics.mean(p.stat().st_size for p in data)),
            "split_commands": split_commands(runs),
        }
        if args.code:
            figures["compare"] = compare_codes(args, runs, work)
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
