"""Index build at scale, side by side: stock bm25s in one process vs `rise-batch index --workers 2`.

For each corpus, in one run on one machine: build wall time, process-tree CPU time, peak memory of the whole process
tree (children included, sampled every 0.1 s: summed PSS, each shared page counted once, beside summed RSS, which
counts a page once per process mapping it; bench/treemem.py), index size on disk, load time, and warm latency of a
3-sub-query top-1000 search; on wiki2015 also recall@10/100/1000 of squad_wiki's gold articles. Each step runs
in its own subprocess so memory figures do not bleed into each other. Stock runs under a memory guard: if its
process tree passes --stock-limit-gb it is killed and reported as such.

    python -m bench.index_scale                       # wiki2015 + the 1M derived corpus (made if missing)
    python -m bench.index_scale --skip-big            # wiki2015 only

Writes bench/results/index_scale.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.common import REPO, RESULTS, SCRATCH, WIKI, Run, read_result
from bench.common import SQUAD as SQUAD_DIR
from bench.derive_corpus import derive
from bench.treemem import TreeMemory

SQUAD = SQUAD_DIR / "queries.jsonl"
GB = 1024**3
MIN_AVAILABLE = 1.5 * GB
ARRAYS = ("data.csc.index.npy", "indices.csc.index.npy", "indptr.csc.index.npy")
VOCAB_FILES = ("vocab.index.json", "params.index.json")


class TreeMonitor:
    """Peak memory and CPU seconds of a process and all its descendants, sampled every 0.1 s (bench/treemem.py).

    Two memory figures: summed RSS (each process's resident pages, so pages shared by the driver and its workers
    count once per process) and summed PSS (shared pages divided among the processes that map them: the tree's
    pages counted once). PSS is the honest one; RSS is kept beside it because older results report it."""

    def __init__(self, pid: int, limit_bytes: float | None = None, period: float = 0.1) -> None:
        self.pid, self.limit = pid, limit_bytes
        self.cpu: dict[int, float] = {}
        self.killed: str | bool = False
        self.mem = TreeMemory([pid], period, on_sample=self._on_sample)

    def _on_sample(self, rss: int, pids: list[int]) -> None:
        import psutil

        for pid in pids:
            try:
                t = psutil.Process(pid).cpu_times()
                self.cpu[pid] = t.user + t.system
            except psutil.NoSuchProcess:
                pass
        # The machine is shared: stop before the kernel's OOM killer picks someone else's process.
        low = self.limit and psutil.virtual_memory().available < MIN_AVAILABLE
        if self.limit and (rss > self.limit or low) and not self.killed:
            self.killed = f"machine down to {MIN_AVAILABLE / GB:.1f} GB available" if low else "limit"
            for pid in reversed(pids):
                try:
                    psutil.Process(pid).kill()
                except psutil.NoSuchProcess:
                    pass

    def stop(self) -> dict:
        mem = self.mem.stop()
        return {
            "peak_rss_gb": mem["peak_rss_gb"],
            "peak_pss_gb": mem["peak_pss_gb"],
            "memory": mem,
            "cpu_s": round(sum(self.cpu.values()), 1),
        }


def run_measured(cmd: list[str], limit_gb: float | None = None, log: Path | None = None) -> dict:
    """Run a command, return wall time, tree peak RSS / CPU, exit status and the JSON lines it printed."""
    # One string-hash seed for every pipeline: stock bm25s numbers its vocabulary in `set` order, so the two
    # indexes are byte-identical only when built under the same seed (search results are equal regardless).
    env = dict(os.environ, PYTHONPATH=str(REPO), DISABLE_TQDM="1", PYTHONHASHSEED="0")
    t0 = time.perf_counter()
    load0 = os.getloadavg()[0]
    p = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    mon = TreeMonitor(p.pid, limit_gb * GB if limit_gb else None)
    lines = []
    for line in p.stdout:
        lines.append(line.rstrip("\n"))
        if log:
            with open(log, "a") as fh:
                fh.write(line)
    rc = p.wait()
    res = {"wall_s": round(time.perf_counter() - t0, 1), "exit": rc, **mon.stop()}
    res["loadavg_1m_start_end"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
    if mon.killed:
        res["killed"] = f"process tree passed {limit_gb} GB" if mon.killed == "limit" else mon.killed
    stages = [json.loads(x[6:]) for x in lines if x.startswith("STAGE ")]
    if stages:
        res["stages"] = stages
    out = [json.loads(x[7:]) for x in lines if x.startswith("RESULT ")]
    if out:
        res.update(out[-1])
    if rc != 0 and not mon.killed:
        res["tail"] = lines[-15:]
    return res


def du(path: Path) -> float:
    return round(sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / GB, 3)


# ---------------------------------------------------------------- children (run in their own process)


def _stage(name: str, t0: float) -> None:
    import psutil

    rss = psutil.Process().memory_info().rss / GB
    print("STAGE " + json.dumps({"stage": name, "t": round(time.perf_counter() - t0, 1), "rss_gb": round(rss, 2)}))
    sys.stdout.flush()


def child_stock_build(corpus: str, out: str) -> None:
    """The paper's public pipeline: the whole corpus in one list, bm25s.tokenize, BM25.index, BM25.save."""
    import bm25s
    import Stemmer

    from rise_batch.corpus.readers import iter_docs

    t0 = time.perf_counter()
    docids, texts = [], []
    for d in iter_docs(corpus):
        docids.append(d.docid)
        texts.append(d.text)
    _stage("read", t0)
    tokens = bm25s.tokenize(texts, stopwords="en", stemmer=Stemmer.Stemmer("english"), show_progress=False)
    _stage("tokenize", t0)
    del texts
    model = bm25s.BM25(k1=1.5, b=0.75)
    model.index(tokens, show_progress=False)
    _stage("index", t0)
    del tokens
    model.save(out, show_progress=False)
    Path(out, "docids.json").write_text(json.dumps(docids))
    _stage("save", t0)


def _query_triples(n: int) -> list[list[str]]:
    qs = [json.loads(line)["query"] for line in SQUAD.read_text().splitlines() if line.strip()]
    return [qs[i : i + 3] for i in range(0, 3 * n, 3)]


def _latency(fn, triples: list[list[str]]) -> dict:
    for t in triples:  # warm: one full pass first, so the mmap'd posting lists it touches are in the page cache
        fn(t)
    lat = []
    for t in triples:
        t0 = time.perf_counter()
        fn(t)
        lat.append((time.perf_counter() - t0) * 1000)
    lat.sort()
    return {
        "n": len(lat),
        "p50_ms": round(lat[len(lat) // 2], 2),
        "p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))], 2),
    }


def child_search(kind: str, index_dir: str, recall: bool) -> None:
    import psutil

    triples = _query_triples(200)
    t0 = time.perf_counter()
    if kind == "stock":  # as the paper's code does: BM25.load, then tokenize + retrieve (numpy backend)
        import bm25s
        import Stemmer

        model = bm25s.BM25.load(index_dir)
        docids = json.loads(Path(index_dir, "docids.json").read_text())
        stemmer = Stemmer.Stemmer("english")
        n = len(docids)

        def search(qs: list[str], k: int = 1000) -> list[list[str]]:
            tok = bm25s.tokenize(qs, stopwords="en", stemmer=stemmer, show_progress=False)
            res = model.retrieve(tok, k=min(k, n), show_progress=False)
            return [[docids[i] for i, s in zip(d, sc, strict=True) if s > 0] for d, sc in zip(*res, strict=True)]
    else:
        from rise_batch.index import load_index

        index = load_index(index_dir, backend="numba" if kind == "ours" else "numpy")

        def search(qs: list[str], k: int = 1000) -> list[list[str]]:
            return [h.docids for h in index.search(qs, k)]

    load_s = time.perf_counter() - t0
    res = {"load_s": round(load_s, 2), "rss_after_load_gb": round(psutil.Process().memory_info().rss / GB, 3)}
    res["latency_3x_top1000"] = _latency(search, triples)
    if recall:
        from rise_batch.index.recall import evaluate_recall
        from rise_batch.queries import read_queries

        class S:
            def search(self, qs, k):
                from rise_batch.index import Hits

                return [Hits(d, [1.0] * len(d)) for d in search(qs, k)]

        t1 = time.perf_counter()
        r = evaluate_recall(S(), read_queries(SQUAD, ids_optional=True), [10, 100, 1000])
        res["recall"] = r["summary"]["recall"] | {"n_queries": r["summary"]["n_queries"]}
        res["recall_eval_s"] = round(time.perf_counter() - t1, 1)
    print("RESULT " + json.dumps(res))


# ---------------------------------------------------------------- driver


def bench_corpus(name: str, corpus: Path, scratch: Path, args, log: Path) -> dict:
    py = sys.executable
    ours_dir, stock_dir = scratch / f"{name}-ours", scratch / f"{name}-stock"
    out: dict = dict(args.previous.get("corpora", {}).get(name, {})) if args.only_search else {}
    out["corpus"] = str(corpus)
    if not args.only_search:
        build_both(name, corpus, ours_dir, stock_dir, args, log, out)
    stock_ok = out.get("stock_build", {}).get("exit") == 0 and (stock_dir / "params.index.json").exists()
    recall = name == "wiki2015"
    for kind, d in (("ours", ours_dir), ("ours-numpy", ours_dir), ("stock", stock_dir)):
        if kind == "stock" and not stock_ok:
            continue
        out[f"{kind}_search"] = run_measured(
            [py, "-m", "bench.index_scale", "_search", kind, str(d), "1" if recall and kind != "ours-numpy" else "0"],
            log=log,
        )
        print(f"[{name}] {kind} search: {out[f'{kind}_search']}", flush=True)
    if stock_ok:
        import numpy as np

        out["identical_index_files"] = all(
            np.array_equal(np.load(ours_dir / a, mmap_mode="r"), np.load(stock_dir / a, mmap_mode="r")) for a in ARRAYS
        ) and all((ours_dir / f).read_bytes() == (stock_dir / f).read_bytes() for f in VOCAB_FILES)
    out["ratios"] = ratios(out)
    return out


def build_both(name: str, corpus: Path, ours_dir: Path, stock_dir: Path, args, log: Path, out: dict) -> None:
    py = sys.executable
    print(f"[{name}] ours: rise-batch index --workers {args.workers}", flush=True)
    cmd = [py, "-m", "rise_batch.cli", "index", "--corpus", str(corpus), "--out", str(ours_dir)]
    out["ours_build"] = run_measured(
        [*cmd, "--workers", str(args.workers), "--shard-docs", str(args.shard_docs), "--overwrite"], log=log
    )
    if ours_dir.exists():
        out["ours_build"]["index_gb"] = du(ours_dir)
        out["ours_build"]["counts"] = json.loads((ours_dir / "meta.json").read_text())["counts"]
    print(f"[{name}] ours: {out['ours_build']}", flush=True)
    print(f"[{name}] stock: bm25s.tokenize + BM25.index in one process (guard {args.stock_limit_gb} GB)", flush=True)
    out["stock_build"] = run_measured(
        [py, "-m", "bench.index_scale", "_stock-build", str(corpus), str(stock_dir)],
        limit_gb=args.stock_limit_gb,
        log=log,
    )
    if out["stock_build"]["exit"] == 0:
        out["stock_build"]["index_gb"] = du(stock_dir)
    print(f"[{name}] stock: {out['stock_build']}", flush=True)


def ratios(r: dict) -> dict:
    o, s = r.get("ours_build", {}), r.get("stock_build", {})
    if s.get("exit") != 0:
        return {"stock": s.get("killed") or f"failed (exit {s.get('exit')})"}
    return {
        "build_speedup": round(s["wall_s"] / o["wall_s"], 2),
        "peak_rss_ours_over_stock": round(o["peak_rss_gb"] / s["peak_rss_gb"], 3),
        "peak_pss_ours_over_stock": round(o["peak_pss_gb"] / s["peak_pss_gb"], 3) if s.get("peak_pss_gb") else None,
    }


def table(results: dict) -> str:
    rows = [
        "| corpus | pipeline | build s | CPU s | peak PSS (RSS) GB | index GB | load s | 3x top-1000 p50 / p99 ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results["corpora"].items():
        for who in ("stock", "ours"):
            b = r.get(f"{who}_build", {})
            s = r.get(f"{who}_search", {})
            lat = s.get("latency_3x_top1000", {})
            build = (
                b.get("wall_s") if b.get("exit") == 0 else f"{b.get('killed') or 'failed'} after {b.get('wall_s')} s"
            )
            rows.append(
                f"| {name} | {who} | {build} | {b.get('cpu_s')} | {b.get('peak_pss_gb')} ({b.get('peak_rss_gb')}) "
                f"| {b.get('index_gb', '-')} "
                f"| {s.get('load_s', '-')} | {lat.get('p50_ms', '-')} / {lat.get('p99_ms', '-')} |"
            )
        s = r.get("ours-numpy_search", {}).get("latency_3x_top1000", {})
        if s:
            rows.append(f"| {name} | ours, numpy backend | | | | | | {s['p50_ms']} / {s['p99_ms']} |")
    return "\n".join(rows)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.index_scale", description=__doc__.split("\n\n")[0])
    ap.add_argument("--wiki", type=Path, default=WIKI, help="the real corpus (recall is computed on it)")
    ap.add_argument("--big", type=Path, default=SCRATCH / "syn1m", help="the 1M-document corpus dir")
    ap.add_argument("--big-docs", type=int, default=1_000_000)
    ap.add_argument("--skip-big", action="store_true")
    ap.add_argument("--skip-wiki", action="store_true")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--shard-docs", type=int, default=2000)
    ap.add_argument("--stock-limit-gb", type=float, default=20.0)
    ap.add_argument("--scratch", type=Path, default=SCRATCH / "index_scale")
    ap.add_argument("--out", type=Path, default=RESULTS / "index_scale.json")
    ap.add_argument("--only-search", action="store_true", help="reuse the indexes and build figures of --out")
    return ap


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_stock-build"]:  # the children run_measured starts
        return child_stock_build(argv[1], argv[2])
    if argv[:1] == ["_search"]:
        return child_search(argv[1], argv[2], argv[3] == "1")
    args = build_parser().parse_args(argv)
    run = Run("index_scale", args)
    previous = read_result(args.out) if args.only_search else None
    args.previous = previous["figures"] if previous else {}
    args.scratch.mkdir(parents=True, exist_ok=True)
    log = args.scratch / "children.log"
    results: dict = {"corpora": {}}
    if args.only_search:
        results = args.previous | {"corpora": dict(args.previous.get("corpora", {}))}
    if not args.skip_wiki:
        results["corpora"]["wiki2015"] = bench_corpus("wiki2015", args.wiki, args.scratch, args, log)
        run.write(results, args.out, quiet=True)  # the wiki figures survive a 1M run that is stopped
    if not args.skip_big:
        if not (args.big / "DERIVED.json").exists():
            print(f"deriving {args.big_docs} documents into {args.big}", flush=True)
            derive(args.wiki, args.big, args.big_docs)
        results["derived_corpus"] = json.loads((args.big / "DERIVED.json").read_text())
        print("1M corpus: " + results["derived_corpus"]["how"], flush=True)
        results["corpora"]["syn1m"] = bench_corpus("syn1m", args.big, args.scratch, args, log)
    results["table"] = table(results)
    print(results["table"])
    run.write(results, args.out)


if __name__ == "__main__":
    main()
