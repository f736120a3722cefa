"""Benchmark of the trajectory engine against the scripted fake server at a fixed model latency.

1. Throughput: trajectories per minute vs concurrency (Ray, 2 actors), with the scripted agent (search, rg, read
   the TOC, read a TOC range, answer: 5 model calls and 4 tool calls per trajectory). Measured from the first
   trajectory start to the last end in events.jsonl, so actor start-up is not counted; it is reported apart.
2. Harness overhead at 1 s model latency: per model call, the time the loop waited beyond the server's latency
   (client, HTTP, limiter, JSON, the fake server's own work); per tool call, the time of each tool as the loop sees
   it (thread hop + the tool itself: BM25 + hardlinks, a bubblewrap process, a file read); and the share of a
   trajectory's wall time that is not the model. Target: harness < 5% of wall time.
3. Wall-clock overshoot at budget expiry: trajectories that would run forever (server hang, sleeping tool, slow
   model that never answers) with a 5 s budget, measured from the worker's `start` to `end` events (workspace
   set-up and the trajectory file included). Target: p99 <= 2 s.

The fake server runs in its own process (as a real API would), the corpus is the bundled 100-article sample,
structured by the heuristic and indexed with BM25.

    python -m bench.trajectories [--latency-ms 1000] [--concurrency 1,4,16,64] [--budget-s 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import psutil

from bench.common import REPO, Run, pct

SAMPLE = REPO / "rise_batch" / "data" / "enwiki_sample.jsonl.gz"
TARGET_OVERHEAD_SHARE = 0.05
TARGET_OVERSHOOT_P99_S = 2.0


def stats(xs: list[float], scale: float = 1.0, nd: int = 2) -> dict:
    if not xs:
        return {}
    return {
        "n": len(xs),
        "mean": round(statistics.mean(xs) * scale, nd),
        "p50": round(pct(xs, 50) * scale, nd),
        "p99": round(pct(xs, 99) * scale, nd),
        "max": round(max(xs) * scale, nd),
    }


def build_world(root: Path) -> tuple[Path, list[tuple[str, str]]]:
    import gzip

    from rise_batch.config import load_structure_config
    from rise_batch.structuring.job import run_structure

    cfg = load_structure_config(
        None, corpus=str(SAMPLE), out=str(root / "docs"), backend="heuristic", workers=0, index=True, progress=False
    )
    run_structure(cfg)
    titles = []
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            titles.append((row["docid"], row["text"].split("title: ", 1)[1].split("\n", 1)[0].strip('"')))
    return root / "docs", titles


class FakeServer:
    """`rise-batch fake-llm` in its own process (`repo`: that checkout's server, e.g. the code before a change)."""

    def __init__(self, latency_ms: float, engine: str | None = None, repo: str | None = None) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rise_batch.cli",
                "fake-llm",
                "--port",
                "0",
                "--allow-config",
                "--latency-ms",
                str(latency_ms),
                *(["--engine", engine] if engine else []),
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=os.environ | {"PYTHONPATH": repo} if repo else None,
            cwd=repo,
        )
        line = self.proc.stdout.readline()
        m = re.search(r"(http://\S+/v1)", line)
        if not m:
            self.proc.kill()
            raise RuntimeError(f"fake-llm did not start: {line!r}")
        self.base_url = m.group(1)

    def configure(self, **changes) -> None:
        req = urllib.request.Request(
            self.base_url + "/_config", data=json.dumps(changes).encode(), headers={"Content-Type": "application/json"}
        )
        urllib.request.urlopen(req).read()

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def write_queries(path: Path, titles: list[tuple[str, str]], n: int, marker: str = "", tag: str = "q") -> Path:
    rows = []
    for i in range(n):
        docid, title = titles[i % len(titles)]
        query = f"What does the article on '{title}' say about it? {marker}".strip()
        rows.append({"query_id": f"{tag}{i:04d}", "query": query, "answer": title, "gold_doc_ids": [docid]})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def run(root: Path, name: str, docs: Path, queries: Path, base_url: str, **over) -> tuple[float, Path]:
    from rise_batch.agent.job import run_trajectories
    from rise_batch.agent.run_config import load_run_config

    out = root / name
    opts = dict(
        queries=str(queries),
        system="rise",
        out=str(out),
        docs=str(docs),
        index=str(docs / "index"),
        workers=2,
        index_backend="numpy",
        progress=False,
        llm_base_url=base_url,
        llm_model="gpt-5.4-mini",
        llm_rpm=10_000_000,
        llm_tpm=10**11,
        llm_concurrency=256,
    )
    opts.update(over)
    t0 = time.monotonic()
    run_trajectories(load_run_config(None, **opts))
    return time.monotonic() - t0, out


def read_run(out: Path) -> tuple[list[dict], list[dict]]:
    trajectories = [json.loads(p.read_text()) for p in (out / "trajectories").glob("*.json")]
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    return trajectories, events


class CpuMeter(threading.Thread):
    """CPU seconds used by the trajectory workers (and the sandboxes they reaped) while a run lasts.

    CPU time does not depend on how busy the machine is, so it says what the harness costs where wall-clock
    figures on a shared machine cannot.
    """

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.seen: dict[int, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        me = psutil.Process()
        while not self.stop.wait(0.25):
            for p in me.children(recursive=True):  # this benchmark's own Ray instance only
                if "TrajectoryWorker" in " ".join(_cmdline(p)):
                    try:
                        t = p.cpu_times()
                        self.seen[p.pid] = t.user + t.system + t.children_user + t.children_system
                    except psutil.Error:
                        pass

    def seconds(self) -> float:
        self.stop.set()
        self.join()
        return sum(self.seen.values())


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def server_cpu(server) -> float:
    t = psutil.Process(server.proc.pid).cpu_times()
    return t.user + t.system


def throughput(root, docs, titles, server, levels: list[int], latency_s: float) -> list[dict]:
    rows = []
    for c in levels:
        n = max(3 * c, 12)
        q = write_queries(root / f"tp{c}.jsonl", titles, n, tag=f"c{c}-")
        meter, server_before = CpuMeter(), server_cpu(server)
        meter.start()
        total, out = run(root, f"tp{c}", docs, q, server.base_url, concurrency=c)
        worker_cpu, server_s = meter.seconds(), server_cpu(server) - server_before
        trajectories, events = read_run(out)
        calls = sum(t["model_calls"] for t in trajectories)
        tools = sum(sum(t["tool_calls"].values()) for t in trajectories)
        starts = [e["t"] for e in events if e["event"] == "start"]
        ends = [e["t"] for e in events if e["event"] == "end"]
        span = max(ends) - min(starts)
        ok = sum(t["stop_reason"] == "answered" for t in trajectories)
        per_traj = [t["elapsed_s"] for t in trajectories]
        ideal = 60.0 / (5 * latency_s) * c  # 5 model calls of pure latency per trajectory
        rows.append(
            {
                "concurrency": c,
                "trajectories": n,
                "answered": ok,
                "trajectories_per_min": round(n / span * 60, 1),
                "ideal_per_min_model_bound": round(ideal, 1),
                "trajectory_s": stats(per_traj),
                "startup_and_teardown_s": round(total - span, 2),
                "worker_cpu_s": round(worker_cpu, 2),
                "worker_cpu_ms_per_trajectory": round(worker_cpu / n * 1000, 1),
                "worker_cpu_ms_per_call": round(worker_cpu / (calls + tools) * 1000, 2),
                "fake_server_cpu_ms_per_request": round(server_s / max(calls, 1) * 1000, 2),
                "load_avg_1m": round(os.getloadavg()[0], 2),
            }
        )
        print(
            f"  concurrency {c:>3}: {n:>4} trajectories, {rows[-1]['trajectories_per_min']:>7.1f}/min "
            f"(model-bound ideal {ideal:.1f}/min), trajectory p50 {rows[-1]['trajectory_s']['p50']} s, "
            f"start-up+teardown {rows[-1]['startup_and_teardown_s']} s; worker CPU "
            f"{rows[-1]['worker_cpu_ms_per_call']} ms per model/tool call (incl. actor start-up), fake server "
            f"{rows[-1]['fake_server_cpu_ms_per_request']} ms/request",
            flush=True,
        )
    return rows


def overhead(out: Path, latency_s: float) -> dict:
    trajectories, events = read_run(out)
    model_calls = [e for e in events if e["event"] == "model_call"]
    tool_calls = [e for e in events if e["event"] == "tool_call"]
    per_model = [e["seconds"] - latency_s for e in model_calls]
    by_tool: dict[str, list[float]] = {}
    for e in tool_calls:
        by_tool.setdefault(e["tool"], []).append(e["seconds"])
    walls, model_share, tool_share, loop_share, harness_share = [], [], [], [], []
    for t in trajectories:
        wall = t["elapsed_s"]
        model_wait = t["model_calls"] * latency_s
        model_over = t["timing"]["model_s"] - model_wait
        tools = t["timing"]["tool_s"]
        loop = wall - t["timing"]["model_s"] - tools
        walls.append(wall)
        model_share.append(model_wait / wall)
        tool_share.append(tools / wall)
        loop_share.append(loop / wall)
        harness_share.append((model_over + loop) / wall)
    return {
        "model_call_overhead_ms": stats(per_model, 1000, 1),
        "tool_call_ms": {k: stats(v, 1000, 1) for k, v in sorted(by_tool.items())},
        "share_of_wall": {
            "model_latency": round(statistics.mean(model_share), 4),
            "tools": round(statistics.mean(tool_share), 4),
            "harness_model_call_overhead_plus_loop": round(statistics.mean(harness_share), 4),
            "loop_bookkeeping": round(statistics.mean(loop_share), 4),
            "everything_but_model_latency": round(1 - statistics.mean(model_share), 4),
        },
        "trajectory_wall_s": stats(walls),
    }


def overshoot(root, docs, titles, server, budget_s: float, n: int, concurrency: int) -> dict:
    markers = ["[fake:hang=600]", "[fake:tool-sleep=600]", "[fake:never-answer] [fake:sleep=0.7]"]
    rows = []
    q = root / "overshoot.jsonl"
    for i in range(n):
        docid, title = titles[i % len(titles)]
        query = f"What does the article on '{title}' say about it? {markers[i % len(markers)]}"
        rows.append({"query_id": f"o{i:04d}", "query": query, "gold_doc_ids": [docid]})
    q.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _, out = run(root, "overshoot", docs, q, server.base_url, concurrency=concurrency, wall_clock_s=budget_s)
    trajectories, events = read_run(out)
    start = {e["query_id"]: e["t"] for e in events if e["event"] == "start"}
    end = {e["query_id"]: e["t"] for e in events if e["event"] == "end"}
    kinds = {r["query_id"]: markers.index(next(m for m in markers if m in r["query"])) for r in rows}
    by_kind: dict[str, list[float]] = {}
    worker_side = []
    for qid in end:
        over = end[qid] - start[qid] - budget_s
        worker_side.append(over)
        by_kind.setdefault(["server hang", "sleeping tool", "slow never-answering model"][kinds[qid]], []).append(over)
    reasons = sorted({t["stop_reason"] for t in trajectories})
    return {
        "budget_s": budget_s,
        "trajectories": len(trajectories),
        "stop_reasons": reasons,
        "overshoot_s": stats(worker_side, 1, 3),
        "by_kind_s": {k: stats(v, 1, 3) for k, v in by_kind.items()},
        "loop_reported_overshoot_s": stats([t["elapsed_s"] - budget_s for t in trajectories], 1, 3),
    }


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.trajectories", description=__doc__.split("\n\n")[0])
    ap.add_argument("--latency-ms", type=float, default=1000.0)
    ap.add_argument("--concurrency", default="1,4,16,64")
    ap.add_argument("--budget-s", type=float, default=5.0)
    ap.add_argument("--overshoot-n", type=int, default=48)
    ap.add_argument("--out", help="the results file (default bench/results/trajectories.json)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    run = Run("trajectories", args)
    import ray

    levels = [int(x) for x in args.concurrency.split(",")]
    latency_s = args.latency_ms / 1000
    root = Path(tempfile.mkdtemp(prefix="rise-bench-traj-"))
    os.chmod(root, 0o755)
    server = FakeServer(args.latency_ms)
    try:
        t0 = time.monotonic()
        docs, titles = build_world(root)
        print(f"world: 100 structured docs + BM25 index in {time.monotonic() - t0:.1f} s", flush=True)
        # workers at the driver's niceness, as executor/ray.init_ray starts a local Ray (Ray's 15 starves them)
        os.environ.setdefault("RAY_worker_niceness", "0")
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # private
        print(f"throughput at {args.latency_ms:g} ms model latency (Ray, 2 actors):", flush=True)
        tp = throughput(root, docs, titles, server, levels, latency_s)
        lo, hi = tp[0], tp[-1]
        marginal = (hi["worker_cpu_s"] - lo["worker_cpu_s"]) / max(hi["trajectories"] - lo["trajectories"], 1)
        cpu = {
            "worker_cpu_ms_per_trajectory_marginal": round(marginal * 1000, 1),
            "worker_cpu_ms_per_step_marginal": round(marginal * 1000 / 9, 2),  # 5 model calls + 4 tool calls
            "note": "marginal = CPU difference between the largest and smallest run over their trajectory "
            "difference, so actor start-up cancels out; includes the sandbox processes of bash calls",
        }
        print(
            f"worker CPU (marginal, start-up excluded): {cpu['worker_cpu_ms_per_trajectory_marginal']} ms per "
            f"trajectory = {cpu['worker_cpu_ms_per_step_marginal']} ms per model/tool call",
            flush=True,
        )
        print("harness overhead:", flush=True)
        oh = {f"concurrency_{c}": overhead(root / f"tp{c}", latency_s) for c in levels}
        for k, v in oh.items():
            s = v["share_of_wall"]
            print(
                f"  {k}: model call +{v['model_call_overhead_ms']['p50']} ms p50 "
                f"(p99 {v['model_call_overhead_ms']['p99']} ms); tools "
                + ", ".join(f"{t} {x['p50']} ms" for t, x in v["tool_call_ms"].items())
                + f"; share of wall: harness {s['harness_model_call_overhead_plus_loop']:.1%}, "
                f"tools {s['tools']:.1%}, model latency {s['model_latency']:.1%}",
                flush=True,
            )
        server.configure(latency_ms=200.0)
        print(f"overshoot at a {args.budget_s:g} s budget ({args.overshoot_n} trajectories, 16 in flight):")
        os_ = overshoot(root, docs, titles, server, args.budget_s, args.overshoot_n, 16)
        o = os_["overshoot_s"]
        print(f"  overshoot p50 {o['p50']} s, p99 {o['p99']} s, max {o['max']} s; stop reasons {os_['stop_reasons']}")
        for k, v in os_["by_kind_s"].items():
            print(f"    {k}: p50 {v['p50']} s, max {v['max']} s")
    finally:
        server.close()
        ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    share = oh[f"concurrency_{levels[0]}"]["share_of_wall"]["harness_model_call_overhead_plus_loop"]
    result = {
        "latency_ms": args.latency_ms,
        "throughput": tp,
        "worker_cpu": cpu,
        "overhead": oh,
        "overshoot": os_,
        "targets": {
            "harness_share_of_wall": TARGET_OVERHEAD_SHARE,
            "harness_share_met": share < TARGET_OVERHEAD_SHARE,
            "overshoot_p99_s": TARGET_OVERSHOOT_P99_S,
            "overshoot_met": os_["overshoot_s"]["p99"] <= TARGET_OVERSHOOT_P99_S,
        },
    }
    run.write(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
