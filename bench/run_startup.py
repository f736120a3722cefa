"""Start-up cost of `rise-batch run --workers 2` over `--workers 0`, idle and beside busy processes, side by side.

Issue 14's target: 6 short queries (8 s budgets, 4,858-document wiki2015 index, scripted agent at 50 ms) take at
most 5 s more with `--workers 2` than with `--workers 0`, busy or not. Each run is its own `rise-batch run` process,
as a user types it, so Ray's start, the actors' imports, the index load and numba's compile are all inside the
measured wall. "Busy" is two CPU-bound processes (`while 1: pass`) at the bench's own niceness beside the run.

Several checkouts can be compared in one go (`--code NAME=PATH`, e.g. the code before a change in a `git worktree`):
the runs are interleaved (rep 1: every checkout idle and busy, then rep 2, ...), so the machine's load drifts over
all of them alike; each figure is recorded with the 1-minute load average before it. The docs and the index are
built once (by this checkout) and shared. A run that fails is recorded with its last error line and left out of the
figures (never timed); a missing trajectory file stops the bench; each run's stop reasons are recorded (a query
that hits its 8 s budget under load ends early, which shortens that run).

`--exit-only` times just the exit: from a command's last statement, with a local Ray and 2 actors up, to the end of
its process (Ray's shutdown included), for each checkout in turn.

    python -m bench.run_startup [--reps 3] [--modes idle,busy] [--code before=../before]   # run_startup.json
    python -m bench.run_startup --exit-only --code before=../before                        # run_startup_exit.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.common import REPO, SCRATCH, WIKI, Run
from bench.trajectories import FakeServer, write_queries

BURN = "while 1: pass"


def prepare(root: Path, corpus: Path, docs_n: int, n_queries: int) -> tuple[Path, Path]:
    """The structured docs with their index, and the query file (the scripted agent answers each with its title)."""
    import pyarrow.parquet as pq

    from rise_batch.config import load_structure_config
    from rise_batch.structuring.job import run_structure

    docs = root / "docs"
    cfg = load_structure_config(
        None,
        corpus=str(corpus),
        out=str(docs),
        backend="heuristic",
        workers=0,
        index=True,
        progress=False,
        limit=docs_n,
    )
    run_structure(cfg)
    dm = pq.read_table(docs / "docmap.parquet", columns=["docid", "relpath"]).to_pylist()
    titles = [(r["docid"], Path(r["relpath"]).stem.replace("_", " ")) for r in dm]
    return docs, write_queries(root / "q.jsonl", titles, n_queries)


def run_once(code: Path, docs: Path, queries: Path, out: Path, workers: int, budget_s: float, base_url: str) -> dict:
    """One `rise-batch run` of the checkout at `code`; its wall, its trajectories' stop reasons and elapsed."""
    cmd = [sys.executable, "-m", "rise_batch.cli", "run", "--queries", str(queries), "--docs", str(docs)]
    cmd += ["--index", str(docs / "index"), "--out", str(out), "--workers", str(workers)]
    cmd += ["--wall-clock-s", str(budget_s), "--base-url", base_url, "--model", "gpt-5.4-mini", "--no-progress"]
    env = os.environ | {"PYTHONPATH": str(code)}
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=code, env=env)
    wall = time.monotonic() - t0
    if proc.returncode != 0:  # recorded, never timed: under heavy load Ray's node start can time out (30 s)
        shutil.rmtree(out, ignore_errors=True)
        why = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1:] or ["?"]
        return {"failed": why[0][-300:], "wall_s": round(wall, 2), "load_1m": round(load, 2)}
    trajs = [json.loads(t.read_text()) for t in (out / "trajectories").glob("*.json")]
    if len(trajs) != len(queries.read_text().splitlines()):
        raise SystemExit(f"run_startup: `--workers {workers}` ({code}) wrote {len(trajs)} trajectories")
    shutil.rmtree(out)
    return {
        "wall_s": round(wall, 2),
        "load_1m": round(load, 2),
        "stop_reasons": sorted(t["stop_reason"] for t in trajs),  # a budget hit under load shortens that run
        "trajectory_s": sorted(t["elapsed_s"] for t in trajs),
    }


class Burners:
    """Two CPU-bound processes beside the run (the issue's "busy"), started and stopped by their pids."""

    def __init__(self, n: int) -> None:
        self.procs = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(n)]

    def close(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait()


def rounds(reps: int, modes: str, busy: int, settle_s: float) -> Iterator[tuple[int, str]]:
    """(rep, mode) for every rep and each of `modes` ("idle,busy"), interleaved so that the checkouts compared in a
    round see the same machine; in a busy round `busy` CPU-bound processes run (started `settle_s` before)."""
    for rep in range(reps):
        for mode in modes.split(","):
            burners = Burners(busy) if mode == "busy" else None
            try:
                time.sleep(settle_s if burners else 0)
                yield rep, mode
            finally:
                if burners:
                    burners.close()


EXIT_PROBE = """
import time, ray
from rise_batch.executor.ray import init_ray
init_ray(None)
@ray.remote
class Probe:
    def ping(self):
        return 1
ray.get([Probe.remote().ping.remote() for _ in range(2)])
print(time.monotonic(), flush=True)
"""


def measure_exit(codes: dict[str, str], reps: int) -> dict[str, list[dict]]:
    """The exit alone: from a command's last statement (a local Ray with 2 actors up) to its process's end.

    CLOCK_MONOTONIC is system-wide on Linux, so the child's last timestamp and the parent's are comparable."""
    out: dict[str, list[dict]] = {name: [] for name in codes}
    for _ in range(reps):
        for name, code in codes.items():
            env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")} | {"PYTHONPATH": code}
            load = os.getloadavg()[0]
            proc = subprocess.run([sys.executable, "-c", EXIT_PROBE], capture_output=True, text=True, env=env)
            end = time.monotonic()
            if proc.returncode != 0:  # recorded, never timed (Ray's node start can time out under heavy load)
                why = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1:] or ["?"]
                out[name].append({"failed": why[0][-300:], "load_1m": round(load, 2)})
            else:
                last = float(proc.stdout.split()[-1])
                out[name].append({"exit_s": round(end - last, 2), "load_1m": round(load, 2)})
            print(json.dumps({"code": name, **out[name][-1]}), flush=True)
    return out


def measure(args: argparse.Namespace) -> dict[str, Any]:
    codes = dict(c.split("=", 1) for c in args.code) | {args.name: str(REPO)}
    root = Path(tempfile.mkdtemp(prefix="rise-bench-startup-", dir=args.scratch))
    os.chmod(root, 0o755)
    res: dict[str, Any] = {"docs": args.docs, "queries": args.queries, "budget_s": args.budget_s, "latency_ms": 50.0}
    res |= {"busy_processes": args.busy, "codes": codes, "runs": []}
    server = None
    try:
        docs, queries = prepare(root, args.corpus, args.docs, args.queries)
        server = FakeServer(50.0)
        for rep, mode in rounds(args.reps, args.modes, args.busy, args.settle_s):
            for name, code in codes.items():
                row = {"rep": rep, "mode": mode, "code": name}
                for w in (0, 2):
                    r = run_once(Path(code), docs, queries, root / "out", w, args.budget_s, server.base_url)
                    row[f"workers_{w}"] = r
                failed = any("failed" in row[f"workers_{w}"] for w in (0, 2))
                extra = row["workers_2"]["wall_s"] - row["workers_0"]["wall_s"]
                row["extra_s"] = None if failed else round(extra, 2)
                print(json.dumps(row), flush=True)
                res["runs"].append(row)
    finally:
        if server is not None:
            server.close()
        shutil.rmtree(root, ignore_errors=True)
    res["summary"] = summary(res["runs"])
    return res


def summary(runs: list[dict]) -> dict[str, dict]:
    """Per (checkout, mode): the extra wall of every rep, its median, and the load averages they were measured at."""
    out: dict[str, dict] = {}
    for r in runs:
        empty: dict[str, Any] = {"extra_s": [], "workers_0_s": [], "workers_2_s": [], "load": [], "failed": 0}
        s = out.setdefault(f"{r['code']}/{r['mode']}", empty)
        if r["extra_s"] is None:
            s["failed"] += 1
            continue
        s["extra_s"].append(r["extra_s"])
        s["workers_0_s"].append(r["workers_0"]["wall_s"])
        s["workers_2_s"].append(r["workers_2"]["wall_s"])
        s["load"] += [r["workers_0"]["load_1m"], r["workers_2"]["load_1m"]]
    for s in out.values():
        s["extra_median_s"] = round(statistics.median(s["extra_s"]), 2) if s["extra_s"] else None
    return out


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.run_startup", description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--modes", default="idle,busy", help="idle, busy or both (comma-separated)")
    ap.add_argument("--busy", type=int, default=2, help="CPU-bound processes beside a busy run")
    ap.add_argument("--settle-s", type=float, default=2.0, help="wait after starting the busy processes")
    ap.add_argument("--code", action="append", default=[], help="NAME=PATH of another checkout to compare")
    ap.add_argument("--name", default="after", help="this checkout's name in the results")
    ap.add_argument("--queries", type=int, default=6)
    ap.add_argument("--budget-s", type=float, default=8.0)
    ap.add_argument("--docs", type=int, default=4858)
    ap.add_argument("--corpus", type=Path, default=WIKI)
    ap.add_argument("--scratch", type=Path, default=SCRATCH)
    ap.add_argument("--out", type=Path, help="the results file (default bench/results/run_startup[_exit].json)")
    ap.add_argument("--exit-only", action="store_true", help="measure only the exit of a local Ray with 2 actors")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.exit_only:
        run = Run("run_startup_exit", args)
        codes = dict(c.split("=", 1) for c in args.code) | {args.name: str(REPO)}
        run.write({"exit": measure_exit(codes, args.reps)}, args.out)
        return 0
    run = Run("run_startup", args)
    args.scratch.mkdir(parents=True, exist_ok=True)
    res = measure(args)
    print(json.dumps(res["summary"], indent=2))
    run.write(res, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
