"""A fresh node's time to its first trajectory, with the docs and the index in object storage (SeaweedFS), idle and
beside busy processes, for this checkout and others side by side.

The corpus is derived from wiki2015 (bench/derive_corpus.py, bench/scratch/syn<N>), uploaded to a local S3 server,
structured there with `--index` (heuristic tier, 2 workers) once, by this checkout. Then, per rep and mode, each
checkout runs `rise-batch run --workers W` with an empty `--cache-dir` (a fresh node: nothing made yet) and 2
queries answered by the scripted agent (fake server, 50 ms a call). W defaults to 0: the node's worker is the
command's own process, so Ray's start-up (the same for every checkout, and timing out on a loaded machine) is not in
the figure. Recorded from the run's own stats: the node's seconds to make its docs tree and its index copy, and its
first trajectory's start after its worker started; the driver's check of the docs and index before any worker
starts (not in the node's figure); and the command's wall. "Busy" is `--busy` CPU-bound processes
(`while 1: pass`, default 2 per core: load ~2x the cores). Runs are interleaved (rep 1: every checkout idle then
busy, ...), the checkouts taking turns going first, each on a cache of its own kept until the end (see fresh_node),
each with the 1-minute load average before it.

    python -m bench.node_start --docs 20000 --code before=../before     # bench/results/node_start_20k.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import REPO, RESULTS, SCRATCH, WIKI, Run
from bench.pipeline_prep import short
from bench.run_startup import rounds
from bench.trajectories import FakeServer, write_queries


def derived(scratch: Path, docs: int, src: Path) -> Path:
    """bench/scratch/syn<N>, made by bench/derive_corpus.py unless a finished one of that size is there."""
    out = scratch / f"syn{short(docs)}"
    info = out / "DERIVED.json"
    if not (info.exists() and json.loads(info.read_text()).get("docs") == docs):
        cmd = [sys.executable, "-m", "bench.derive_corpus", "--src", str(src), "--out", str(out), "--docs", str(docs)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=REPO)
    return out


def cli(code: Path, args: list, env: dict) -> tuple[dict, float]:
    """`rise-batch ARGS --json` of the checkout at `code`: (its stats, wall seconds)."""
    cmd = [sys.executable, "-m", "rise_batch.cli", *map(str, args), "--json"]
    t0, cpu0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(cmd, env=env | {"PYTHONPATH": str(code)}, cwd=code, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[3:5])} ({code}) exited {r.returncode}:\n{r.stderr[-3000:]}")
    out = r.stdout[r.stdout.index("{") :]
    stats = json.loads(out[: out.rindex("}") + 1])
    # the command's CPU, its spawned processes' included: user (Python) and system (the kernel: file creation)
    stats["cpu"] = {"user_s": round(cpu.ru_utime - cpu0.ru_utime, 2), "sys_s": round(cpu.ru_stime - cpu0.ru_stime, 2)}
    return stats, round(wall, 2)


def prepare(a: argparse.Namespace, env: dict, bucket: str, work: Path) -> tuple[str, Path]:
    """The structured OUT (with its index) in the bucket, and a query file of 2 titles the scripted agent answers."""
    import pyarrow.parquet as pq

    from rise_batch.storage import location

    corpus = derived(a.scratch, a.docs, a.src)
    for f in sorted(corpus.glob("*.parquet")):
        location(f"{bucket}/corpus/{f.name}").upload(f)
    out = f"{bucket}/out"
    cli(REPO, ["structure", "--corpus", f"{bucket}/corpus", "--out", out, "--backend", "heuristic", "--index",
               "--workers", 2, "--no-progress"], env)  # fmt: skip
    with location(f"{out}/docmap.parquet").open("rb") as f:
        dm = pq.read_table(f, columns=["docid", "relpath"]).slice(0, 2).to_pylist()
    titles = [(r["docid"], Path(r["relpath"]).stem.replace("_", " ")) for r in dm]
    return out, write_queries(work / "q.jsonl", titles, 2)


def fresh_node(code: Path, out: str, queries: Path, work: Path, url: str, env: dict, workers: int) -> dict[str, Any]:
    """One run on an empty cache of its own (`work/cache-<n>`): the node's figures from the run's stats. No run's
    cache is removed before the last run ends: on this VM's ext4 (no journal) creating files is slower for minutes
    after many were removed (300k files: 10.0 s of system CPU, 18.8 s 40 s after removing as many, 32.0 s after a
    second removal and 150 s of rest), which a fresh node has not seen."""
    n = len(list(work.glob("cache-*")))
    cache, run = work / f"cache-{n}", work / f"run-{n}"
    load = os.getloadavg()[0]
    try:
        args = [
            "run",
            "--queries",
            queries,
            "--system",
            "rise",
            "--docs",
            out,
            "--index",
            f"{out}/index",
            "--out",
            run,
            "--workers",
            workers,
            "--cache-dir",
            cache,
            "--base-url",
            url,
            "--model",
            "gpt-5.4-mini",
        ]
        stats, wall = cli(code, [*args, "--no-progress"], env)
    except RuntimeError as e:  # recorded, never timed: under heavy load Ray's node start can time out
        return {"failed": str(e).strip().splitlines()[-1][-300:], "load_1m": round(load, 2)}
    (node,) = stats["cache"].values()
    inputs = node["inputs"]
    return {
        "first_trajectory_s": node["first_trajectory_s"],
        "docs_s": inputs["docs"]["seconds"],
        "docs_mb": round(inputs["docs"]["bytes"] / 1e6, 1),
        "index_s": inputs["index"]["seconds"],
        "driver_check_s": stats.get("sources_checked_s"),  # before the node starts: not in first_trajectory_s
        "wall_s": wall,
        "cpu_user_s": stats["cpu"]["user_s"],
        "cpu_sys_s": stats["cpu"]["sys_s"],
        "load_1m": round(load, 2),
    }


def measure(a: argparse.Namespace) -> dict[str, Any]:
    from tests.s3 import S3Server

    codes = {a.name: REPO} | {k: Path(v).resolve() for k, v in (c.split("=", 1) for c in a.code)}
    work = Path(tempfile.mkdtemp(prefix="rise-bench-node-", dir=a.scratch))
    os.chmod(work, 0o755)
    res: dict[str, Any] = {"docs": a.docs, "busy_processes": a.busy, "codes": {k: str(v) for k, v in codes.items()}}
    res["runs"] = []
    s3, server = S3Server(), FakeServer(50.0)
    try:
        env = dict(os.environ, OPENAI_API_KEY="x") | s3.env
        os.environ.update(s3.env)  # this process uploads and reads the docmap
        out, queries = prepare(a, env, s3.uri("bench"), work)
        modes = a.modes.split(",")
        for rep, mode in rounds(a.reps, a.modes, a.busy, a.settle_s):
            order = list(codes.items())  # the checkouts take turns going first, across reps and across modes
            for name, code in order[::-1] if (rep + modes.index(mode)) % 2 else order:
                row = {"rep": rep, "mode": mode, "code": name}
                row |= fresh_node(code, out, queries, work, server.base_url, env, a.workers)
                print(json.dumps(row), flush=True)
                res["runs"].append(row)
        if a.keep:  # the last run's cache (a docs tree and an index) for other benches, e.g. search_load
            last = max(work.glob("cache-*"), key=lambda p: int(p.name.split("-")[1]))
            shutil.move(last, a.keep)
    finally:
        server.close()
        s3.stop()
        shutil.rmtree(work, ignore_errors=True)
    return res


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.node_start", description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=20_000)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--modes", default="idle,busy", help="idle, busy or both (comma-separated)")
    ap.add_argument("--busy", type=int, default=2 * (os.cpu_count() or 1), help="CPU-bound processes when busy")
    ap.add_argument("--settle-s", type=float, default=5.0, help="wait after starting the busy processes")
    ap.add_argument("--keep", type=Path, help="move the last run's cache (docs tree, index) here at the end")
    ap.add_argument("--code", action="append", default=[], help="NAME=PATH of another checkout to compare")
    ap.add_argument("--name", default="after", help="this checkout's name in the results")
    ap.add_argument("--workers", type=int, default=0, help="the run's --workers (0: the node is this process)")
    ap.add_argument("--src", type=Path, default=WIKI, help="the corpus the derived one is drawn from")
    ap.add_argument("--scratch", type=Path, default=SCRATCH)
    ap.add_argument("--out", type=Path, help="the results file (default bench/results/node_start_<docs>.json)")
    return ap


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    a.scratch.mkdir(parents=True, exist_ok=True)
    run = Run("node_start", a)
    run.write(measure(a), a.out or RESULTS / f"node_start_{short(a.docs)}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
