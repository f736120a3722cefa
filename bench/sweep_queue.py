"""A sweep's wall time with one queue (every unfinished cell's queries over one pool of workers) against cell after
cell (each cell its own map over the pool, then its judging: what a sweep did before), on the same grid.

The grid: rise and rise-bm25 x K in {5, 50} = 4 cells over the bundled 100-article sample (heuristic structure,
BM25), N queries per cell, each cell with one slow query (the scripted agent's `[fake:sleep=S]`: every one of its
model calls S seconds longer), the cells' slow tail. 2 Ray workers (a private local Ray), the fake server in its own
process at a fixed latency, the judge on. Each mode starts from an empty OUT; both are timed from the call to the
end of the report, in this process.

    python -m bench.sweep_queue [--queries 8] [--latency-ms 200] [--slow-s 1.5] [--concurrency 4] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from bench.common import REPO
from bench.trajectories import FakeServer, build_world


def sweep_config(out: Path, queries: Path, docs: Path, base_url: str, concurrency: int) -> dict:
    return {
        "name": "bench-queue",
        "out": str(out),
        "queries": str(queries),
        "systems": ["rise", "rise-bm25"],
        "models": ["gpt-5.4-mini"],
        "k": [5, 50],
        "corpora": [{"name": "sample", "docs": str(docs), "index": str(docs / "index")}],
        "run": {
            "workers": 2,
            "concurrency": concurrency,
            "max_calls": 10,
            "index_backend": "numpy",
            "progress": False,
            "ray_address": "local",
            "llm": {"base_url": base_url, "rpm": 1_000_000, "tpm": 10_000_000_000},
        },
        "judge": {"model": "gpt-5.4-mini", "base_url": base_url, "concurrency": 8},
    }


def timed(cfg_data: dict, cell_by_cell: bool) -> dict:
    from rise_batch.eval.sweep import SweepRun, expand, parse_sweep
    from rise_batch.eval.sweep_runner import run_sweep

    cfg = parse_sweep({"sweep": cfg_data})
    t0 = time.perf_counter()
    if cell_by_cell:
        for cell in expand(cfg):
            result = run_sweep(cfg, SweepRun(only=[cell.cell_id]))
        result = run_sweep(cfg)  # every cell done: only the report
    else:
        result = run_sweep(cfg)
    wall = time.perf_counter() - t0
    assert not result["incomplete"], result
    return {"wall_s": round(wall, 2), "cells": result["cells"], "cost_usd": result["cost_usd"]}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.sweep_queue", description=__doc__.split("\n\n")[0])
    p.add_argument("--queries", type=int, default=8, help="queries per cell (one of them slow)")
    p.add_argument("--latency-ms", type=float, default=200.0, help="the fake server's latency per model call")
    p.add_argument("--slow-s", type=float, default=1.5, help="the slow query's extra seconds per model call")
    p.add_argument("--concurrency", type=int, default=4, help="trajectories in flight over the 2 workers")
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "sweep_queue.json"), help="the results file")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="bench-sweep-queue-"))
    root.chmod(0o755)  # the sandbox's uid reads the docs
    try:
        docs, titles = build_world(root)
        rows = []
        for i, (docid, title) in enumerate(titles[: args.queries]):
            marker = f" [fake:sleep={args.slow_s:g}]" if i == 0 else ""
            rows.append({"query_id": docid, "query": f"What does the article on '{title}' say?{marker}",
                         "answer": title, "gold_doc_ids": [docid]})  # fmt: skip
        queries = root / "q.jsonl"
        queries.write_text("".join(json.dumps(r) + "\n" for r in rows))
        server = FakeServer(args.latency_ms)
        try:
            figures = {}
            for name, cell_by_cell in (("cell_after_cell", True), ("one_queue", False)):
                out = root / name
                figures[name] = timed(sweep_config(out, queries, docs, server.base_url, args.concurrency), cell_by_cell)
        finally:
            server.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    a, b = figures["cell_after_cell"], figures["one_queue"]
    print(f"{'grid':<28} 4 cells x {args.queries} queries, 1 slow per cell, 2 workers, concurrency {args.concurrency}")
    print(f"{'':<28} {'cell after cell':>16} {'one queue':>12}")
    print(f"{'sweep wall (s)':<28} {a['wall_s']:>16.2f} {b['wall_s']:>12.2f}")
    print(f"{'speed-up':<28} {'':>16} {a['wall_s'] / b['wall_s']:>11.2f}x")
    result = {"params": vars(args) | {"out": None}, "figures": figures, "speedup": round(a["wall_s"] / b["wall_s"], 3)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
