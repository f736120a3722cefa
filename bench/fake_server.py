"""The fake server's cost and the harness share, its two HTTP engines side by side in one run (issue 14 section 2).

Interleaved rounds (threads, asyncio, threads, asyncio, ...), so a busy shared machine weighs on both alike:
0. the server alone: real structuring request bodies (the first wiki2015 documents, the project's prompt and TOC
   schema) sent over 1 and 8 keep-alive connections from this process at zero latency, to a server of each engine
   at the same moment; the server's CPU per request and requests/s;
1. structuring (bench/structure_throughput.py's measurement, in a child process each): the server's CPU per request
   at zero latency in the steady 20-70% window, and docs/s end to end, for the default transport in process, the
   same with the server pinned to core 1 (taskset -c 1: the engine's ceiling with the server off its cores), and
   2 Ray workers;
2. trajectories (bench/trajectories.py's measurement): the harness share of wall time at concurrency C and 1 s
   model latency, and how late model calls land beyond the server's latency (p50/p99), with the server's CPU per
   request.

    python bench/fake_server.py [--docs 3000] [--rounds 2] [--concurrency 16] [--skip server,structure,trajectories]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
import structure_throughput as st  # noqa: E402
import trajectories as tj  # noqa: E402

ENGINES = ("threads", "asyncio")
UNLIMITED = {"llm_rpm": 10**9, "llm_tpm": 10**12}
CONFIGS = {  # name -> (engine config, server cpus)
    "in process, default transport": ({"workers": 0}, None),
    "in process, default transport, server on core 1": ({"workers": 0}, "1"),
    "2 Ray workers, default transport": ({"workers": 2}, None),
}


def request_bodies(n: int) -> list[bytes]:
    """The chat bodies the structure job sends for the first `n` wiki2015 documents (prompt, document, schema)."""
    import pyarrow.parquet as pq

    from rise_batch.prompts import load_prompt
    from rise_batch.structure.propose import TOC_RESPONSE_FORMAT, build_messages

    prompt = load_prompt("structure_toc")
    texts = pq.read_table(sorted(st.DEFAULT_CORPUS.glob("*.parquet"))[0], columns=["text"]).column("text")
    return [
        json.dumps(
            {"model": "gpt-5.4-nano", "messages": build_messages(t, prompt), "response_format": TOC_RESPONSE_FORMAT}
        ).encode()
        for t in texts.to_pylist()[:n]
    ]


def server_round(engine: str, bodies: list[bytes], connections: int = 8, repeat: int = 1) -> dict[str, Any]:
    """The server's CPU per request under `connections` keep-alive clients sending `bodies` `repeat` times."""
    proc, url = st.start_server({"engine": engine})
    split = urlsplit(url)
    try:

        def client(mine: list[bytes]) -> None:
            conn = http.client.HTTPConnection(split.hostname, split.port, timeout=60)
            for body in mine:
                conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
                reply = conn.getresponse()
                reply.read()
                assert reply.status == 200, reply.status
            conn.close()

        def blast(work: list[bytes]) -> None:
            threads = [threading.Thread(target=client, args=(work[i::connections],)) for i in range(connections)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

        blast(bodies[:50])  # warm-up: the tokenizer's tables load on the first request
        server = psutil.Process(proc.pid)
        before, load, t0 = server.cpu_times(), os.getloadavg()[0], time.monotonic()
        blast(bodies * repeat)
        wall, after = time.monotonic() - t0, server.cpu_times()
        n = len(bodies) * repeat
        cpu = (after.user + after.system) - (before.user + before.system)
        return {
            "engine": engine,
            "requests": n,
            "server_cpu_ms_per_request": round(cpu * 1000 / n, 3),
            "requests_per_s": round(n / wall, 1),
            "load_average": [round(load, 1), round(os.getloadavg()[0], 1)],
        }
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def side_by_side(bodies: list[bytes], connections: int) -> list[dict[str, Any]]:
    """`server_round` for every engine at the same moment (one thread each), so they share the machine's load."""
    with ThreadPoolExecutor(len(ENGINES)) as pool:
        return list(pool.map(lambda engine: server_round(engine, bodies, connections), ENGINES))


def structure_round(engine: str, docs: int, name: str, config: dict[str, Any], cpus: str | None) -> dict[str, Any]:
    spec = {
        "name": f"fs-{engine}",
        "corpus": str(st.DEFAULT_CORPUS),
        "out": str(st.SCRATCH / f"fake-server-{engine}"),
        "limit": docs,
        "config": {**UNLIMITED, **config},
        "expected_requests": int(0.95 * docs),
        "server": {"engine": engine},
        "server_cpus": cpus,
    }
    r = st.run_child(spec)
    steady = r["steady"] or {}
    return {
        "engine": engine,
        "config": name,
        "docs_per_second": r["docs_per_second"],
        "server_cpu_ms_per_request": steady.get("server_cpu_ms_per_request"),
        "engine_cpu_ms_per_request": steady.get("engine_cpu_ms_per_request"),
        "load_average": r["load_average"],
        "requests": r["server_requests"],
        "statuses": r["server_by_status"],
    }


def trajectory_round(
    engine: str, root: Path, docs: Path, titles: list, concurrency: int, before: str | None
) -> dict[str, Any]:
    if engine == "before" and before:  # that checkout's server, its default engine
        server = tj.FakeServer(1000.0, repo=before)
    else:
        server = tj.FakeServer(1000.0, engine=engine)
    try:
        load = os.getloadavg()[0]
        row = tj.throughput(root, docs, titles, server, [concurrency], 1.0)[0]
        oh = tj.overhead(root / f"tp{concurrency}", 1.0)
    finally:
        server.close()
    shutil.rmtree(root / f"tp{concurrency}", ignore_errors=True)
    return {
        "engine": engine,
        "concurrency": concurrency,
        "harness_share": oh["share_of_wall"]["harness_model_call_overhead_plus_loop"],
        "loop_share": oh["share_of_wall"]["loop_bookkeeping"],
        "model_call_late_ms": oh["model_call_overhead_ms"],
        "late_p50_ms": oh["model_call_overhead_ms"]["p50"],
        "late_p99_ms": oh["model_call_overhead_ms"]["p99"],
        "server_cpu_ms_per_request": row["fake_server_cpu_ms_per_request"],
        "trajectories_answered": row["answered"],
        "trajectories": row["trajectories"],
        "load_average": [round(load, 2), round(os.getloadavg()[0], 2)],
    }


def summary(rows: list[dict[str, Any]], key: str, group: str) -> dict[str, dict[str, float]]:
    """Per `group` value and engine: the median of `key` over the rounds (rows without it are left out)."""
    values: dict[str, dict[str, list[float]]] = {}
    for row in rows:
        if row.get(key) is not None:
            values.setdefault(str(row[group]), {}).setdefault(row["engine"], []).append(row[key])
    return {g: {e: round(statistics.median(v), 4) for e, v in by.items()} for g, by in values.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=3000, help="wiki2015 documents per structuring round")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds per engine")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--before", help="a checkout of the code before the change: its server joins the trajectory rounds")
    ap.add_argument("--skip", default="", help="comma list: structure,trajectories")
    ap.add_argument("--out", default=str(st.REPO / "bench" / "results" / "fake_server.json"))
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    results: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "rounds": args.rounds,
    }
    if "server" not in skip:  # both engines loaded at the same moment: the machine's load weighs on both alike
        bodies, rows = request_bodies(600), []
        for i in range(args.rounds * 2):
            for connections in (1, 8):
                pair = side_by_side(bodies, connections)
                for r in sorted(pair, key=lambda r: r["engine"]):
                    rows.append({**r, "connections": connections})
                    print(
                        f"[{i}] server alone, {connections} connection(s), {r['engine']}: "
                        f"{r['server_cpu_ms_per_request']} ms CPU/request, {r['requests_per_s']} requests/s; "
                        f"load {r['load_average']}",
                        flush=True,
                    )
        results["server"] = {
            "rows": rows,
            "server_cpu_ms_per_request": summary(rows, "server_cpu_ms_per_request", "connections"),
        }
    if "structure" not in skip:
        st.SCRATCH.mkdir(parents=True, exist_ok=True)
        rows = []
        for i in range(args.rounds):
            for name, (config, cpus) in CONFIGS.items():
                for engine in ENGINES if i % 2 == 0 else ENGINES[::-1]:
                    rows.append(structure_round(engine, args.docs, name, config, cpus))
                    r = rows[-1]
                    print(
                        f"[{i}] {name}, {engine}: {r['docs_per_second']} docs/s, server "
                        f"{r['server_cpu_ms_per_request']} ms CPU/request, engine {r['engine_cpu_ms_per_request']} "
                        f"ms; load {r['load_average']}",
                        flush=True,
                    )
        for engine in ENGINES:
            shutil.rmtree(st.SCRATCH / f"fake-server-{engine}", ignore_errors=True)
        results["structure"] = {
            "rows": rows,
            "docs_per_second": summary(rows, "docs_per_second", "config"),
            "server_cpu_ms_per_request": summary(rows, "server_cpu_ms_per_request", "config"),
        }
    if "trajectories" not in skip:
        import ray

        root = Path(tempfile.mkdtemp(prefix="rise-bench-fake-server-"))
        os.chmod(root, 0o755)
        try:
            docs, titles = tj.build_world(root)
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
            rows = []
            servers = (*ENGINES, "before") if args.before else ENGINES
            for i in range(args.rounds):
                for engine in servers if i % 2 == 0 else servers[::-1]:
                    t0 = time.monotonic()
                    rows.append(trajectory_round(engine, root, docs, titles, args.concurrency, args.before))
                    r = rows[-1]
                    late = r["model_call_late_ms"]
                    print(
                        f"[{i}] trajectories c={args.concurrency}, {engine}: harness {r['harness_share']:.2%} "
                        f"(loop {r['loop_share']:.2%}), model calls late p50 {late['p50']} / p99 {late['p99']} ms, "
                        f"server {r['server_cpu_ms_per_request']} ms CPU/request, {r['trajectories_answered']}/"
                        f"{r['trajectories']} answered, load {r['load_average']} ({time.monotonic() - t0:.0f} s)",
                        flush=True,
                    )
        finally:
            ray.shutdown()
            shutil.rmtree(root, ignore_errors=True)
        results["trajectories"] = {
            "rows": rows,
            **{k: summary(rows, k, "concurrency") for k in ("harness_share", "late_p50_ms", "late_p99_ms")},
            "server_cpu_ms_per_request": summary(rows, "server_cpu_ms_per_request", "concurrency"),
        }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1))
    print(json.dumps({k: v for k, v in results.items() if k in ("structure", "trajectories")}, indent=1)[:3000])
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
