"""Throughput of LLM structuring end to end (`run_structure`, llm backend) against the fake server on this machine.

Every measurement runs in its own process with its own fake server (`rise-batch fake-llm`, a separate process, so
it never shares the GIL with the engine) and, for Ray configurations, its own local Ray. Measured, side by side:
  - engine configurations on the first --compare-docs documents: in-process with each HTTP transport (the SDK's
    httpx, the SDK's aiohttp, the project's `direct` path) and Ray workers; for each, documents per second end to
    end and the steady-state CPU per request of every process group (engine driver, Ray workers, limiter actor,
    Ray's own daemons, fake server), taken between 20% and 70% of the run so start-up and tail are left out;
  - the engine ceiling on the whole corpus with the best configuration (zero-latency server, limits far above
    anything reachable), and what 2 cores could do at that CPU cost with and without the co-located server;
  - resume cost: the finished job run again; it must send nothing (the fresh server counts zero requests);
  - limit adherence: server latency 300 ms, rpm 3000 (also enforced by the server), >= 60 s of traffic: achieved
    requests in the first minute vs the limit, the busiest 60-s window and 429s, all from the server's own log;
  - checkpoint flush cost (one Parquet part of flush_docs rows) per document;
  - a projection to 1M documents at given RPM/TPM and gpt-5.4-nano prices from the measured token counts.

    python -m bench.structure_throughput [--corpus ../shared/data/wiki2015] [--compare-docs 4000] [--quick]

Wall-clock figures depend on what else runs on the machine; the load average is recorded with each measurement,
and the CPU-derived ceilings are what the code costs regardless of neighbours.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.common import REPO, WIKI, Run
from bench.common import SCRATCH as BENCH_SCRATCH

SCRATCH = Path(os.environ.get("BENCH_SCRATCH", BENCH_SCRATCH / "structure"))
UNLIMITED = {"llm_rpm": 10**9, "llm_tpm": 10**12}
TARGET_DOCS_PER_S = 300.0


# ---------------------------------------------------------------- one measurement (runs in a child process)


def start_server(
    options: dict[str, Any], cpus: str | None = None, repo: str | None = None
) -> tuple[subprocess.Popen, str]:
    """The fake server in its own process (`cpus`: pinned there with taskset, e.g. "1"; `repo`: run that checkout's
    server, so that engines of two checkouts compared side by side face the same server code)."""
    pinned = ["taskset", "-c", cpus] if cpus else []
    cmd = [*pinned, sys.executable, "-m", "rise_batch.cli", "fake-llm", "--port", "0"]
    for k, v in options.items():
        cmd += [f"--{k.replace('_', '-')}", str(v)]
    env = os.environ | {"PYTHONPATH": repo} if repo else None
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=repo or REPO, env=env)
    line = proc.stdout.readline() if proc.stdout else ""
    m = re.search(r"(http://\S+/v1)", line)
    if not m:
        proc.kill()
        raise RuntimeError(f"fake-llm did not start: {line!r}")
    return proc, m.group(1)


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=60) as r:
        return json.loads(r.read())


def group_of(cmdline: str, is_driver: bool, is_server: bool) -> str:
    if is_server:
        return "fake_server"
    if is_driver:
        return "driver"
    if "StructureWorker" in cmdline:
        return "ray_workers"
    if "LimiterActor" in cmdline:
        return "limiter_actor"
    return "ray_system"


def cpu_by_process(server_pid: int) -> dict[int, tuple[str, float]]:
    import psutil

    me = psutil.Process()
    out: dict[int, tuple[str, float]] = {}
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            out[p.pid] = (group_of(" ".join(p.cmdline()), p.pid == me.pid, p.pid == server_pid), t.user + t.system)
        except psutil.Error:
            continue
    return out


class SteadyWindow(threading.Thread):
    """Snapshots per-process CPU when the server has seen `lo` and then `hi` requests."""

    def __init__(self, url: str, server_pid: int, lo: int, hi: int) -> None:
        super().__init__(daemon=True)
        self.url, self.server_pid, self.lo, self.hi = url, server_pid, lo, hi
        self.marks: list[tuple[float, int, dict]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        for target in (self.lo, self.hi):
            while not self.stop.wait(0.05):
                n = get_json(self.url + "/_stats")["requests"]
                if n >= target:
                    self.marks.append((time.monotonic(), n, cpu_by_process(self.server_pid)))
                    break

    def result(self) -> dict[str, Any] | None:
        if len(self.marks) < 2:
            return None
        (t0, n0, a), (t1, n1, b) = self.marks
        groups: dict[str, float] = {}
        for pid, (group, cpu) in b.items():
            groups[group] = groups.get(group, 0.0) + cpu - (a[pid][1] if pid in a else 0.0)
        requests = n1 - n0
        if requests <= 0:  # a run so short that both marks fell in one poll: no steady state to report
            return None
        ms = {g: round(1000 * v / requests, 3) for g, v in sorted(groups.items())}
        engine = sum(v for g, v in ms.items() if g != "fake_server")
        return {
            "requests": requests,
            "seconds": round(t1 - t0, 2),
            "requests_per_s": round(requests / (t1 - t0), 1),
            "cpu_ms_per_request": ms,
            "engine_cpu_ms_per_request": round(engine, 3),
            "server_cpu_ms_per_request": ms.get("fake_server", 0.0),
        }


def max_in_window(times: list[float], window: float) -> int:
    import bisect

    times = sorted(times)
    return max((bisect.bisect_left(times, t + window) - i for i, t in enumerate(times)), default=0)


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one structure job as `spec` says; the engine in this process, the fake server in its own."""
    from rise_batch.config import load_structure_config
    from rise_batch.structuring.job import run_structure

    pin = spec.get("pin") or {}  # {"engine": "0", "server": "1"}: each on its own core, the engine's ceiling
    if pin.get("engine"):
        os.sched_setaffinity(0, {int(c) for c in pin["engine"].split(",")})  # Ray's processes inherit it
    cpus = pin.get("server")
    server, url = start_server(spec.get("server", {}), cpus, spec.get("server_repo"))
    try:
        out = Path(spec["out"])
        if not spec.get("resume"):
            shutil.rmtree(out, ignore_errors=True)
        overrides = {
            "corpus": spec["corpus"],
            "out": str(out),
            "backend": "llm",
            "limit": spec.get("limit"),
            "progress": False,
            "llm_base_url": url,
            **spec.get("config", {}),
        }
        cfg = load_structure_config(None, **overrides)
        if cfg.n_workers:
            import ray

            # as executor/ray.init_ray starts a local Ray: workers at the driver's niceness, not Ray's +15, which
            # starved them beside any busy process (the fake server, other jobs) and so measured Ray's scheduling
            os.environ.setdefault("RAY_worker_niceness", "0")
            ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # private
        expected = spec.get("expected_requests", 0)
        window = SteadyWindow(url, server.pid, int(0.2 * expected), int(0.7 * expected)) if expected else None
        if window:
            window.start()
        load_before = os.getloadavg()[0]
        t0 = time.monotonic()
        stats = run_structure(cfg)
        wall = time.monotonic() - t0
        if window:
            window.stop.set()
        server_stats = get_json(url + "/_stats")
        result: dict[str, Any] = {
            "name": spec["name"],
            "docs": stats["docs_total"],
            "wall_seconds": round(wall, 2),
            "docs_per_second": round(stats["docs_total"] / wall, 1),
            "load_average": [round(load_before, 1), round(os.getloadavg()[0], 1)],
            "server_requests": server_stats["requests"],
            "server_by_status": server_stats["by_status"],
            "stats": {k: stats.get(k) for k in STAT_KEYS},
            "steady": window.result() if window else None,
        }
        if spec.get("log"):
            log = get_json(url + "/_log")["entries"]
            times = [e["t"] for e in log]
            first = min(times) if times else 0.0
            result["log"] = {
                "requests": len(times),
                "span_s": round(max(times) - first, 2) if times else 0,
                "first_minute": sum(1 for t in times if t < first + 60.0),
                "max_in_60s": max_in_window(times, 60.0),
                "status_429": sum(1 for e in log if e.get("status") == 429),
            }
        return result
    finally:
        server.terminate()
        server.wait(timeout=30)


STAT_KEYS = (
    "docs_total",
    "docs_with_toc",
    "llm_calls",
    "reasks",
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "cost_usd",
    "outcomes",
    "transport",
)


def run_child(spec: dict[str, Any]) -> dict[str, Any]:
    """`measure(spec)` in a fresh process (fresh Ray, fresh limiter, clean process tree to account)."""
    env = os.environ | {"OPENAI_API_KEY": os.environ.get("OPENAI_API_KEY", ""), "RAY_DEDUP_LOGS": "0"}
    proc = subprocess.run(
        [sys.executable, "-m", "bench.structure_throughput", "--child", json.dumps(spec)],
        capture_output=True, text=True, env=env, cwd=REPO,
    )  # fmt: skip
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"measurement {spec['name']} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


# ---------------------------------------------------------------- the benchmark


def ceilings(steady: dict[str, Any] | None, docs_per_request: float, one_process: bool) -> dict[str, float] | None:
    """Documents per second the measured CPU cost allows on 2 otherwise idle cores (an in-process engine is one
    process: it can use one core, whatever the server leaves)."""
    if not steady:
        return None
    engine, server = steady["engine_cpu_ms_per_request"], steady["server_cpu_ms_per_request"]
    cap = 1000 / engine if one_process else float("inf")
    return {
        "two_cores_with_colocated_server": round(min(cap, 2000 / (engine + server)) * docs_per_request, 1),
        "two_cores_engine_only": round(min(cap, 2000 / engine) * docs_per_request, 1),
    }


def flush_cost(n_rows: int = 200, repeat: int = 20) -> float:
    """CPU ms per document of writing checkpoint parts of `n_rows` rows."""
    from rise_batch.structuring.checkpoint import CheckpointStore
    from rise_batch.types import DocResult

    root = SCRATCH / "flush"
    shutil.rmtree(root, ignore_errors=True)
    store = CheckpointStore(root)
    store.ensure()
    row = DocResult(
        "docid-0", "0" * 16, "r" * 16, "toc", json.dumps([["Title", "A description of ten words or so", 12]] * 8),
        8, 6, 1, 1, "{}", 4000, 600, 300, 0.001, 1, 0, "", "llm", "",
    )  # fmt: skip
    rows = [row._replace(docid=f"d{i}") for i in range(n_rows)]
    c0 = time.process_time()
    for _ in range(repeat):
        store.write_part(0, rows)
    return round(1000 * (time.process_time() - c0) / (repeat * n_rows), 4)


def projection(stats: dict[str, Any], docs: int, rpm: int, tpm: int, model: str) -> dict[str, Any]:
    from rise_batch.llm.pricing import PriceTable
    from rise_batch.llm.tokens import counter_for
    from rise_batch.prompts import load_prompt
    from rise_batch.structure.propose import build_messages
    from rise_batch.structuring.plan import CACHE_MIN_TOKENS, messages_tokens

    n = stats["docs_total"]
    per_doc = {k: stats[k] / n for k in ("llm_calls", "input_tokens", "cached_input_tokens", "output_tokens")}
    requests = per_doc["llm_calls"] * docs
    input_tokens, output_tokens = per_doc["input_tokens"] * docs, per_doc["output_tokens"] * docs
    prefix = messages_tokens(build_messages("", load_prompt("structure_toc.txt"))[:1], counter_for(model))
    cached = per_doc["cached_input_tokens"] * docs if prefix >= CACHE_MIN_TOKENS else 0.0
    prices = PriceTable.load()
    minutes = max(requests / rpm, (input_tokens + output_tokens) / tpm)
    return {
        "docs": docs,
        "rpm": rpm,
        "tpm": tpm,
        "model": model,
        "per_doc": {k: round(v, 2) for k, v in per_doc.items()},
        "requests": round(requests),
        "input_tokens": round(input_tokens),
        "output_tokens": round(output_tokens),
        "cached_input_tokens_priced": round(cached),
        "prompt_prefix_tokens": prefix,
        "bound_by": "rpm" if requests / rpm >= (input_tokens + output_tokens) / tpm else "tpm",
        "hours": round(minutes / 60, 2),
        "usd_online": round(prices.cost(model, round(input_tokens), round(cached), round(output_tokens)), 2),
        "usd_batch_api": round(
            prices.cost(model, round(input_tokens), round(cached), round(output_tokens), batch=True), 2
        ),
    }


def corpus_docs(corpus: str) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(p).metadata.num_rows for p in sorted(Path(corpus).glob("*.parquet")))


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m bench.structure_throughput", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    ap.add_argument("--corpus", default=str(WIKI))
    ap.add_argument("--compare-docs", type=int, default=4000, help="documents per compared configuration")
    ap.add_argument("--full-docs", type=int, default=0, help="documents of the ceiling run (0 = the whole corpus)")
    ap.add_argument("--limit-rpm", type=int, default=3000)
    ap.add_argument("--limit-latency-ms", type=float, default=300.0)
    ap.add_argument("--limit-seconds", type=float, default=60.0)
    ap.add_argument("--proj-docs", type=int, default=1_000_000)
    ap.add_argument("--proj-rpm", type=int, default=30_000)
    ap.add_argument("--proj-tpm", type=int, default=150_000_000)
    ap.add_argument("--proj-model", default="gpt-5.4-nano")
    ap.add_argument("--quick", action="store_true", help="small sizes, for checking the script itself")
    ap.add_argument(
        "--pinned", action="store_true", help="also each configuration with the engine on core 0, the server on core 1"
    )
    ap.add_argument("--skip", default="", help="comma list of parts to skip: compare,ceiling,resume,limit")
    ap.add_argument("--out", help="the results file (default bench/results/structure_throughput.json)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.child:
        print(json.dumps(measure(json.loads(args.child))), flush=True)
        return 0

    run = Run("structure_throughput", args)
    skip = set(filter(None, args.skip.split(",")))
    if args.quick:
        args.compare_docs, args.full_docs, args.limit_seconds = 400, 1200, 10.0
    total = corpus_docs(args.corpus)
    full = min(args.full_docs or total, total)
    SCRATCH.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "corpus": args.corpus,
        "corpus_docs": total,
        "compare": [],
    }

    def spec(name: str, n: int | None, config: dict[str, Any], **extra: Any) -> dict[str, Any]:
        expected = int(0.95 * (n or total))  # ~5% of wiki2015 articles are too short to send
        return {"name": name, "corpus": args.corpus, "out": str(SCRATCH / name), "limit": n, "config": config,
                "expected_requests": expected, **extra}  # fmt: skip

    direct = {"llm_http_backend": "direct"}  # the default transport
    configs = [
        ("in-process, direct (default)", {"workers": 0, **direct}),
        ("in-process, SDK httpx", {"workers": 0, "llm_http_backend": "httpx"}),
        ("in-process, SDK aiohttp", {"workers": 0, "llm_http_backend": "aiohttp"}),
        ("2 Ray workers, direct (default)", {"workers": 2, **direct}),
        ("2 Ray workers, direct, 64 in flight each", {"workers": 2, "llm_concurrency": 64, **direct}),
        ("2 Ray workers, SDK httpx", {"workers": 2, "llm_http_backend": "httpx"}),
    ]
    pinned = {"engine": "0", "server": "1"}
    if args.pinned:  # the same on split cores: what the engine does when the server cannot take its CPU
        configs += [(f"{name}, pinned", {**config, "pin": pinned}) for name, config in configs if "64" not in name]
    if "compare" not in skip:
        for i, (name, config) in enumerate(configs):
            config = dict(config)
            pin = config.pop("pin", None)
            r = run_child(spec(f"compare{i}", args.compare_docs, {**UNLIMITED, **config}, pin=pin))
            r["config"] = name
            docs_per_request = r["docs"] / max(r["server_requests"], 1)
            r["cpu_ceilings_docs_per_s"] = ceilings(r["steady"], docs_per_request, not config.get("workers"))
            results["compare"].append(r)
            print_compare(r)
    if "ceiling" not in skip:  # the whole corpus, in-process and on Ray workers; the faster one is the ceiling
        runs = []
        for name, config in (configs[0], configs[3]):
            r = run_child(spec(f"ceiling{len(runs)}", full, {**UNLIMITED, **config}))
            r["config"] = name
            one = not config.get("workers")
            r["cpu_ceilings_docs_per_s"] = ceilings(r["steady"], r["docs"] / max(r["server_requests"], 1), one)
            runs.append((r, config))
            print_compare(r, title=f"whole corpus ({full:,} docs), {name}")
        results["whole_corpus"] = [r for r, _ in runs]
        r, best_config = max(runs, key=lambda rc: rc[0]["docs_per_second"])
        results["ceiling"] = r
        print(f"engine ceiling: {r['docs_per_second']} docs/s end to end with {r['config']}")
        if "resume" not in skip:
            name = f"ceiling{[x for x, _ in runs].index(r)}"
            again = run_child(spec(name, full, {**UNLIMITED, **best_config}, resume=True, expected_requests=0))
            results["resume"] = {
                "wall_seconds": again["wall_seconds"],
                "docs": again["docs"],
                "new_server_requests": again["server_requests"],
            }
            assert again["server_requests"] == 0, f"resume sent {again['server_requests']} requests"
            assert again["docs"] == r["docs"]
            print(f"resume of the finished {r['docs']:,}-doc job: {again['wall_seconds']:.1f} s, 0 requests sent")
        results["projection"] = projection(r["stats"], args.proj_docs, args.proj_rpm, args.proj_tpm, args.proj_model)
        print(projection_line(results["projection"]))
    if "limit" not in skip:
        rate = args.limit_rpm / 60.0
        n = int(rate * (args.limit_seconds + 12) / 0.95)  # enough documents for the whole minute and then some
        r = run_child(
            spec(
                "limit",
                n,
                {"workers": 2, "llm_rpm": args.limit_rpm, "llm_tpm": 10**12, "llm_concurrency": 32, **direct},
                server={"latency_ms": args.limit_latency_ms, "rpm_limit": args.limit_rpm},
                log=True,
                expected_requests=0,
            )
        )
        log = r["log"]
        r["achieved_share_of_limit"] = round(log["first_minute"] / args.limit_rpm, 4)
        r["ok"] = log["max_in_60s"] <= args.limit_rpm and r["achieved_share_of_limit"] >= 0.95 and not log["status_429"]
        results["limit"] = r
        print(
            f"limit adherence (latency {args.limit_latency_ms:.0f} ms, rpm {args.limit_rpm}): first minute "
            f"{log['first_minute']} requests = {r['achieved_share_of_limit']:.1%} of the limit; busiest 60-s window "
            f"{log['max_in_60s']}; server 429s {log['status_429']}; {log['requests']} requests over {log['span_s']} s"
        )
    results["flush_cpu_ms_per_doc"] = {"flush_docs=200": flush_cost(200), "flush_docs=50": flush_cost(50)}
    print(f"checkpoint part write, CPU per doc: {results['flush_cpu_ms_per_doc']}")
    run.write(results, args.out)
    return 0


def print_compare(r: dict[str, Any], title: str | None = None) -> None:
    s = r["steady"] or {}
    ceil = r.get("cpu_ceilings_docs_per_s") or {}
    groups = ", ".join(f"{k} {v}" for k, v in (s.get("cpu_ms_per_request") or {}).items())
    print(
        f"{title or r['config']:<44} {r['docs_per_second']:>7.1f} docs/s end to end ({r['docs']} docs, "
        f"{r['wall_seconds']} s, load {r['load_average']}); steady CPU ms/request: {groups}; "
        f"2-core ceilings: with server {ceil.get('two_cores_with_colocated_server')}, "
        f"engine only {ceil.get('two_cores_engine_only')} docs/s",
        flush=True,
    )


def projection_line(p: dict[str, Any]) -> str:
    cache = "cached as measured" if p["cached_input_tokens_priced"] else "too short for OpenAI's prompt cache"
    return (
        f"projection: {p['docs']:,} docs like these at rpm {p['rpm']:,} / tpm {p['tpm']:,}: {p['requests']:,} "
        f"requests, {p['input_tokens'] / 1e9:.2f}B input + {p['output_tokens'] / 1e6:.0f}M output tokens -> "
        f"{p['hours']:.1f} h ({p['bound_by']}-bound), ${p['usd_online']:,.0f} online / ${p['usd_batch_api']:,.0f} "
        f"Batch API with {p['model']} (prompt prefix {p['prompt_prefix_tokens']} tokens: {cache})"
    )


if __name__ == "__main__":
    sys.exit(main())
