"""1M search, search+link and the sandbox UNDER the trajectory load, each phase apart, and memory per actor.

Issue 14's rows for the interaction space are targets under load, and the 1M pipeline run only logged whole tool
calls. This benchmark runs the trajectory stage alone (`rise-batch run`, RISE at K=1000, the fake agent at a
realistic latency, N Ray workers) over a structured corpus and its index, and meanwhile, in this process, probes
in rounds: BM25 search alone (3 SQuAD sub-queries x top-1000), the whole search tool call into a fresh workspace
(search + hardlinking the union + previews, each phase timed), and `true` in a long-lived sandbox over a 3,000-file
workspace (its lock, start and exec phases). The same probe runs first with no trajectory load, so every figure
has its idle twin from the same run, and each round records the 1-minute load average (the machine is shared).

From the run's events.jsonl it reports each tool's phases (queue for a tool thread, search, link, preview; lock,
start, exec) p50/p90/p99 as the trajectories themselves saw them, and the slowest search calls with their tool
thread's CPU and run-queue time (wall beyond the two is time blocked). Every few seconds it samples each trajectory
actor (the `ray::TrajectoryWorker` processes below the run): RSS, PSS, and the resident/proportional size of its
mappings of the index's files (from /proc/PID/smaps), which says how much of the index the actors share through
the page cache.

    python -m bench.search_load --docs DOCS --index INDEX [--trajectories 200] [--out bench/results/search_load.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.actor_memory import rollup
from bench.common import REPO, SCRATCH, SQUAD, WIKI, Run, pct
from bench.pipeline_prep import squad_queries
from bench.pipeline_probe import start_fake_llm
from bench.workspace import query_triples
from rise_batch.agent.loop import thread_clock
from rise_batch.index.retriever import open_retriever
from rise_batch.space.docstore import DocStore
from rise_batch.space.sandbox import Sandbox, SandboxLimits
from rise_batch.space.tools import search_into
from rise_batch.space.workspace import Workspace

MB = 1024**2
TARGETS = {"search": (20.0, 30.0), "search_link": (100.0, 200.0), "sandbox_true": (10.0, 15.0)}  # p50, p99 ms


def pcts(xs: list[float]) -> dict:
    """p50/p90/p99 (nearest rank) of milliseconds, with the count: the one summary every row uses."""
    if not xs:
        return {"n": 0}
    return {"n": len(xs), **{f"p{p}_ms": round(pct(xs, p), 2) for p in (50, 90, 99)}}


def kernel(index) -> None:
    """The scorer before (`--ab`): bm25s's numba kernel, as trajectory actors searched with it; set on this index
    object only (the numba import and its compiled kernel stay in this process, never in the actors)."""
    index.backend = "numba"


def numpy_scorer(index) -> None:
    """Today's scorer: plain numpy (rise_batch/index/topk.py)."""
    index.backend = "numpy"


class SpaceProbe:
    """Rounds of: search alone, the search tool call into a fresh workspace, `true` in the long-lived sandbox.
    With `ab`, rounds alternate the scorer before (bm25s's numba kernel) and today's, each summarised apart."""

    def __init__(self, index, store: DocStore, scratch: Path, seed: int, subqueries: int, ab: bool) -> None:
        self.index, self.store, self.scratch, self.ab = index, store, scratch, ab
        self.triples = [t[:subqueries] for t in query_triples(2000, seed)]
        self.n = 0
        bash_ws = Workspace(scratch / "bash3000", store)
        bash_ws.add(list(store.relpath)[:3000])
        self.bash_ws, self.sandbox = bash_ws, Sandbox(bash_ws.files_dir, SandboxLimits())

    def round(self) -> dict:
        """One round: the three probes, each timed, with the load average after them."""
        q = self.triples[self.n % len(self.triples)]
        self.n += 1
        before = self.ab and self.n % 2 == 1
        (kernel if before else numpy_scorer)(self.index)
        t0 = time.perf_counter()
        self.index.search(q, 1000)
        search_ms = (time.perf_counter() - t0) * 1000
        with Workspace(self.scratch / f"p{self.n}", self.store) as ws:
            c0, t0 = thread_clock(), time.perf_counter()
            res = search_into(self.index, ws, q, 1000)
            call_ms, c1 = (time.perf_counter() - t0) * 1000, thread_clock()
            docs = len(ws)
        thread = {"call_thread_cpu_ms": c1[0] - c0[0], "call_thread_runq_ms": c1[1] - c0[1]} if c0 and c1 else {}
        t0 = time.perf_counter()
        run = self.sandbox.run("true")
        true_ms = (time.perf_counter() - t0) * 1000
        assert run.exit_code == 0, run
        return {
            "variant": "before" if before else "after",
            "load": os.getloadavg()[0],
            "search_ms": search_ms,
            "search_link_ms": call_ms,
            "ws_docs": docs,
            **{f"call_{k}": v for k, v in (res.phases or {}).items()},
            **thread,
            "sandbox_true_ms": true_ms,
            **{f"true_{k}": v for k, v in (run.phases or {}).items()},
        }

    def close(self) -> None:
        self.sandbox.close()
        self.bash_ws.close()


def summarise(rounds: list[dict]) -> dict:
    """Every round together, or with `--ab` each variant apart (rounds alternate, so both saw the same load)."""
    variants = sorted({r.get("variant", "after") for r in rounds})
    if len(variants) < 2:
        return summarise_rounds(rounds)
    return {v: summarise_rounds([r for r in rounds if r.get("variant") == v]) for v in variants}


def summarise_rounds(rounds: list[dict]) -> dict:
    keys = [k for k in rounds[0] if k.endswith("_ms")] if rounds else []
    loads = [r["load"] for r in rounds]
    out: dict = {k: pcts([r[k] for r in rounds if k in r]) for k in keys}
    out["ws_docs_mean"] = round(sum(r["ws_docs"] for r in rounds) / max(len(rounds), 1), 1)
    out["loadavg_1m"] = {"mean": round(sum(loads) / max(len(loads), 1), 2), "max": max(loads, default=0)}
    return out


def tool_phases(events: Path) -> dict:
    """Per tool: the whole call and each recorded phase, p50/p90/p99 over every call of the run."""
    by: dict[str, dict[str, list[float]]] = {}
    for line in events.read_text().splitlines():
        e = json.loads(line)
        if e.get("event") != "tool_call":
            continue
        d = by.setdefault(e["tool"], {})
        d.setdefault("call_ms", []).append(e["seconds"] * 1000)
        for k, v in (e.get("phases") or {}).items():
            d.setdefault(k, []).append(v)
    return {tool: {k: pcts(v) for k, v in d.items()} for tool, d in sorted(by.items())}


def slowest_calls(events: Path, tool: str = "search", n: int = 5) -> list[dict]:
    """The tool's `n` slowest calls: wall ms, each phase, and the tool thread's CPU and run-queue ms over the call.
    Wall well beyond CPU + run queue is time blocked (I/O, a lock, the GIL): what a tail is made of."""
    calls = []
    for line in events.read_text().splitlines():
        e = json.loads(line)
        if e.get("event") == "tool_call" and e.get("tool") == tool:
            wall = round(e["seconds"] * 1000, 1)
            calls.append({"call_ms": wall, **(e.get("phases") or {}), **(e.get("thread") or {})})
    return sorted(calls, key=lambda c: -c["call_ms"])[:n]


def actor_memory(root_pid: int, index_dir: Path) -> list[dict]:
    """RSS, PSS and the index mappings' Rss/Pss (MB) of every trajectory actor below `root_pid`."""
    import psutil

    out = []
    try:
        procs = psutil.Process(root_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return out
    prefix = str(index_dir.resolve())
    for p in procs:
        try:
            if "TrajectoryWorker" not in " ".join(p.cmdline()):
                continue
            row = {"pid": p.pid, "rss_mb": 0.0, "pss_mb": 0.0, "index_rss_mb": 0.0, "index_pss_mb": 0.0}
            row["private_dirty_mb"] = (rollup(p.pid) or {}).get("private_dirty_mb", 0.0)  # what the issue samples
            for m in p.memory_maps(grouped=True):
                row["rss_mb"] += m.rss / MB
                row["pss_mb"] += m.pss / MB
                if m.path.startswith(prefix):
                    row["index_rss_mb"] += m.rss / MB
                    row["index_pss_mb"] += m.pss / MB
            out.append({k: round(v, 1) if isinstance(v, float) else v for k, v in row.items()})
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


def page_cache_mb(index_dir: Path) -> float | None:
    """MB of the index's files resident in the page cache (util-linux fincore), the one copy the actors map."""
    files = [str(f) for f in sorted(index_dir.iterdir()) if f.is_file()]
    try:
        out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", *files], capture_output=True)
    except FileNotFoundError:
        return None
    return round(sum(int(x) for x in out.stdout.split()) / MB, 1) if out.returncode == 0 else None


def spy(pid: int, seconds: int, out: Path) -> subprocess.Popen:
    """py-spy on one actor: every thread, idle ones too (a thread waiting for the GIL or a core is what the tail
    is made of), raw collapsed stacks, without pausing the process."""
    cmd = ["py-spy", "record", "-r", "200", "-f", "raw", "--idle", "--nonblocking", "--threads", "-d", str(seconds)]
    cmd += ["-o", str(out), "--pid", str(pid)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)


def start_run(args, queries: Path, base_url: str, out: Path, log: Path, pythonpath: str) -> subprocess.Popen:
    cmd = ["nice", "-n", "10", sys.executable, "-m", "rise_batch.cli", "run", "--queries", str(queries)]
    cmd += ["--docs", str(args.docs), "--index", str(args.index), "--out", str(out), "--system", "rise"]
    cmd += ["--k", "1000", "--workers", str(args.workers), "--concurrency", str(args.concurrency)]
    cmd += ["--limit", str(args.trajectories), "--wall-clock-s", "900", "--base-url", base_url]
    cmd += ["--model", "gpt-5.4-mini", "--no-progress"]
    if args.bash_nice is not None:  # the agent's commands' niceness over the harness (RunConfig.bash_nice)
        config = out.parent / f"{out.name}.bash_nice.yaml"
        config.write_text(f"run:\n  bash_nice: {args.bash_nice}\n")
        cmd += ["--config", str(config)]
    code = args.run_code or REPO  # another checkout runs the trajectories: its actors' memory before a change
    env = os.environ | {"PYTHONPATH": str(args.run_code) if args.run_code else pythonpath}
    return subprocess.Popen(cmd, cwd=code, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)  # noqa: SIM115


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m bench.search_load", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--docs", type=Path, required=True, help="structured docs dir (corpus/ + docmap.parquet)")
    ap.add_argument("--index", type=Path, required=True, help="its BM25 index")
    ap.add_argument("--corpus", type=Path, help="the raw derived corpus (to find the queries' gold documents)")
    ap.add_argument("--queries", type=Path, help="use this query file instead")
    ap.add_argument("--trajectories", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--bash-nice", type=int, help="the run's bash_nice (default: the run's own, 10)")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--latency-ms", type=int, default=300)
    ap.add_argument("--idle-rounds", type=int, default=60)
    ap.add_argument("--subqueries", type=int, default=3, help="sub-queries per probed search call (at most 3)")
    ap.add_argument("--ab", action="store_true", help="alternate rounds of the numba kernel and the numpy scorer")
    ap.add_argument("--no-run", action="store_true", help="idle rounds only: no trajectory run")
    ap.add_argument("--run-code", type=Path, help="run the trajectories with this checkout (e.g. the code before)")
    ap.add_argument("--py-spy", type=int, default=0, help="record each trajectory actor this many seconds (raw)")
    ap.add_argument("--scratch", type=Path, default=SCRATCH / "search_load")
    ap.add_argument("--out", type=Path, help="the results file (default bench/results/search_load.json)")
    return ap


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    run = Run("search_load", args)
    shutil.rmtree(args.scratch, ignore_errors=True)
    args.scratch.mkdir(parents=True)
    if args.queries:  # a query file as is (e.g. squad_wiki's own over wiki2015 itself)
        queries, qinfo = args.queries, {"file": str(args.queries)}
    else:  # SQuAD questions with their gold re-found in a derived corpus, as bench/pipeline_1m.py asks them
        queries, qinfo = squad_queries(
            args.corpus, SQUAD / "queries.jsonl", WIKI, args.scratch / "q.jsonl", args.trajectories
        )
    t = time.perf_counter()
    index, store = open_retriever(args.index), DocStore(args.docs)
    res: dict = {"queries": qinfo, "open_s": 0.0}
    res["open_s"] = round(time.perf_counter() - t, 1)
    probe = SpaceProbe(index, store, args.scratch / "ws", seed=1, subqueries=args.subqueries, ab=args.ab)
    for _ in range(3):
        probe.round()  # warm: numba, the index pages the queries touch
    idle = [probe.round() for _ in range(args.idle_rounds)]
    res["probe_idle"] = summarise(idle)
    print("idle:", json.dumps(res["probe_idle"]), flush=True)

    if args.no_run:
        probe.close()
        run.write(res, args.out)
        return
    res["index_page_cache_mb_before"] = page_cache_mb(args.index)
    fake, base_url = start_fake_llm(args.latency_ms, args.scratch / "fake_llm.log")
    run_dir = args.scratch / "run"
    proc = start_run(args, queries, base_url, run_dir, args.scratch / "run.log", os.environ.get("PYTHONPATH", ""))
    loaded: list[dict] = []
    mem: dict[int, dict] = {}
    stop = threading.Event()

    def sample_memory() -> None:
        while not stop.wait(3.0):
            for row in actor_memory(proc.pid, args.index):
                best = mem.get(row["pid"])
                if best is None or row["pss_mb"] > best["pss_mb"]:
                    mem[row["pid"]] = row | {
                        "private_dirty_mb_max": max(
                            row["private_dirty_mb"], (best or {}).get("private_dirty_mb_max", 0)
                        )
                    }
                else:
                    best["private_dirty_mb_max"] = max(best.get("private_dirty_mb_max", 0), row["private_dirty_mb"])

    sampler = threading.Thread(target=sample_memory, daemon=True)
    sampler.start()
    t0 = time.monotonic()
    spies: list[subprocess.Popen] = []
    while proc.poll() is None:
        # rounds only while trajectories run: from the first trajectory file on
        if any((run_dir / "trajectories").glob("*.json")) or time.monotonic() - t0 > 600:
            if args.py_spy and not spies:
                spies = [spy(a["pid"], args.py_spy, args.scratch / f"py-spy-{a['pid']}.txt") for a in mem.values()]
            loaded.append(probe.round())
        else:
            time.sleep(0.5)
    for s in spies:
        s.wait()
    stop.set()
    sampler.join()
    res["run_wall_s"] = round(time.monotonic() - t0, 1)
    res["run_exit"] = proc.returncode
    fake.terminate()
    fake.wait()
    probe.close()
    res["probe_loaded"] = summarise(loaded)
    res["trajectory_tools"] = tool_phases(run_dir / "events.jsonl")
    res["slowest_search_calls"] = slowest_calls(run_dir / "events.jsonl")
    res["trajectories"] = len(list((run_dir / "trajectories").glob("*.json")))
    res["actor_memory_peak"] = sorted(mem.values(), key=lambda r: r["pid"])
    res["index_page_cache_mb_after"] = page_cache_mb(args.index)
    res["index_files_mb"] = round(sum(f.stat().st_size for f in args.index.iterdir()) / MB, 1)
    print("loaded:", json.dumps(res["probe_loaded"]))
    print("tools:", json.dumps(res["trajectory_tools"], indent=1))
    print("slowest search calls:", json.dumps(res["slowest_search_calls"]))
    print("actors:", json.dumps(res["actor_memory_peak"]))
    for name, (t50, t99) in TARGETS.items():
        for when in ("probe_idle", "probe_loaded"):
            for variant, figures in res[when].items() if args.ab else [("", res[when])]:
                row = figures.get(f"{name}_ms", {})
                print(
                    f"{name:>13} {when:>13} {variant:>6}: p50 {row.get('p50_ms')} (<= {t50}) p90 {row.get('p90_ms')} "
                    f"p99 {row.get('p99_ms')} (<= {t99}) ms"
                )
    run.write(res, args.out)


if __name__ == "__main__":
    main()
