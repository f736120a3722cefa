"""Retrievers side by side on squad_wiki: recall@10/100/1000 of bm25, dense and hybrid, build time, index size.

Builds one index directory over wiki2015 (../shared/data/wiki2015, beside the checkout) with both parts: BM25 (as
`rise-batch index`) and dense (the offline wordllama embedder, `--retriever hybrid`), timing each; then scores
squad_wiki's 4,997 questions (gold = the article each was written from) with every retriever, and lists the
queries where hybrid ranks the gold article lower than bm25 does (the "why" when hybrid < bm25 at some K).
Embedding throughput (docs/s and chars/s on this machine's cores) is projected to 1M documents.

    python -m bench.retrievers                 # builds into bench/scratch/retrievers (kept; --rebuild to redo)
    python -m bench.retrievers --workers 2 --embedder wordllama

Writes bench/results/retrievers.json and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from bench.common import SCRATCH, WIKI, Run
from bench.common import SQUAD as SQUAD_DIR

SQUAD = SQUAD_DIR / "queries.jsonl"
KS = (10, 100, 1000)
RETRIEVERS = ("bm25", "dense", "hybrid:rrf:60", "hybrid:weighted:0.5", "hybrid:weighted:0.7")


def du(paths: list[Path]) -> int:
    return sum(f.stat().st_size for p in paths for f in ([p] if p.is_file() else p.rglob("*")) if f.is_file())


def build(out: Path, workers: int, embedder: str) -> dict:
    from rise_batch.index import build_index
    from rise_batch.index.dense import DENSE_DIR, build_dense

    shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    meta = build_index(WIKI, out, workers=workers, log=lambda m: print(f"  bm25: {m}", flush=True))
    t1 = time.perf_counter()
    dense = build_dense(WIKI, out, embedder, workers=workers, log=lambda m: print(f"  dense: {m}", flush=True))
    t2 = time.perf_counter()
    bm25_files = [p for p in out.iterdir() if p.name != DENSE_DIR]
    return {
        "n_docs": meta.n_docs,
        "n_chars": meta.corpus["n_chars"],
        "bm25": {"build_seconds": round(t1 - t0, 1), "bytes": du(bm25_files)},
        "dense": {
            "build_seconds": round(t2 - t1, 1),
            "embed_seconds": dense["build"]["embed_seconds"],
            "bytes": du([out / DENSE_DIR]),
            "embedder": dense["embedder"],
            "dim": dense["dim"],
        },
    }


def ranks_of_gold(hits, gold: list[str]) -> int | None:
    """1-based rank of the best-ranked gold document, None when outside the list."""
    pos = {d: i for i, d in enumerate(hits.docids, start=1)}
    found = [pos[g] for g in gold if g in pos]
    return min(found) if found else None


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.retrievers", description=__doc__.split("\n")[0])
    ap.add_argument("--scratch", type=Path, default=SCRATCH / "retrievers", help="where the index is built (kept)")
    ap.add_argument("--out", type=Path, help="the results file (default bench/results/retrievers.json)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--embedder", default="wordllama")
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--limit", type=int, default=0, help="first N queries only (0 = all)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    run = Run("retrievers", args)
    if not WIKI.is_dir() or not SQUAD.is_file():
        sys.exit(f"retrievers: needs {WIKI} and {SQUAD} (the shared data beside the checkout)")
    from rise_batch.index.recall import score_recall, search_all
    from rise_batch.index.retriever import open_retriever
    from rise_batch.queries import read_queries

    out = args.scratch
    info_path = out / "bench_build.json"
    if args.rebuild or not info_path.is_file():
        print(f"building bm25 + dense over {WIKI} into {out} ({args.workers} workers, {os.cpu_count()} cores)")
        info = build(out, args.workers, args.embedder)
        info_path.write_text(json.dumps(info, indent=2))
    info = json.loads(info_path.read_text())
    queries = [q for q in read_queries(SQUAD, ids_optional=True) if q.gold_doc_ids]
    if args.limit:
        queries = queries[: args.limit]
    results, hits_by = {}, {}
    for name in RETRIEVERS:
        r = open_retriever(out, name)
        t0 = time.perf_counter()
        hits = search_all(r, queries, max(KS), batch=64)
        secs = time.perf_counter() - t0
        hits_by[name] = hits
        scored = score_recall(queries, hits, KS)["summary"]
        results[name] = {"recall": scored["recall"], "search_seconds": round(secs, 1), "n_queries": len(queries)}
        print(f"  {name:<22} " + "  ".join(f"R@{k}={scored['recall'][str(k)]:.4f}" for k in KS) + f"  ({secs:.0f}s)")
    # where the default hybrid ranks gold lower than bm25: the per-query evidence for any K where it loses
    worse = []
    for q, b, d, h in zip(queries, hits_by["bm25"], hits_by["dense"], hits_by["hybrid:rrf:60"], strict=True):
        rb, rd, rh = (ranks_of_gold(x, q.gold_doc_ids) for x in (b, d, h))
        if rb is not None and (rh is None or rh > rb) and any(rb <= k and (rh is None or rh > k) for k in KS):
            worse.append(
                {"query_id": q.query_id, "query": q.query, "rank_bm25": rb, "rank_dense": rd, "rank_hybrid": rh}
            )
    d = info["dense"]
    docs_s = info["n_docs"] / d["embed_seconds"]
    chars_s = info["n_chars"] / d["embed_seconds"]
    report = {
        "corpus": "wiki2015",
        "queries": "squad_wiki",
        "build": info,
        "embedding_throughput": {
            "docs_per_second": round(docs_s, 1),
            "chars_per_second": round(chars_s),
            "mean_chars_per_doc": round(info["n_chars"] / info["n_docs"]),
            "projected_hours_1m_docs_like_wiki2015": round(1e6 / docs_s / 3600, 2),
            "projected_hours_1m_docs_of_5000_chars": round(1e6 * 5000 / chars_s / 3600, 2),
        },
        "recall": results,
        "hybrid_below_bm25": {"n": len(worse), "examples": worse[:10]},
    }
    print()
    print("| retriever | R@10 | R@100 | R@1000 | build s | index MB |")
    print("|---|---|---|---|---|---|")
    for name in RETRIEVERS:
        part = "bm25" if name == "bm25" else "dense" if name == "dense" else None
        secs = info[part]["build_seconds"] if part else info["bm25"]["build_seconds"] + d["build_seconds"]
        size = info[part]["bytes"] if part else info["bm25"]["bytes"] + d["bytes"]
        rec = results[name]["recall"]
        print(f"| {name} | " + " | ".join(f"{rec[str(k)]:.4f}" for k in KS) + f" | {secs:.0f} | {size / 1e6:.1f} |")
    e = report["embedding_throughput"]
    print(
        f"\nembedding: {e['docs_per_second']} docs/s, {e['chars_per_second']:,} chars/s on {os.cpu_count()} cores; "
        f"1M wiki2015-sized docs ~{e['projected_hours_1m_docs_like_wiki2015']} h, "
        f"1M 5k-char docs ~{e['projected_hours_1m_docs_of_5000_chars']} h"
    )
    print(f"hybrid ranks gold below bm25's cut-off on {len(worse)} queries; first ones:")
    for w in worse[:5]:
        ranks = f"bm25 #{w['rank_bm25']} dense #{w['rank_dense']} hybrid #{w['rank_hybrid']}"
        print(f"  {w['query_id']}: {ranks}  {w['query']}")
    run.write(report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
