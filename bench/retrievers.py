"""Retrievers side by side on squad_wiki: recall@10/100/1000 of bm25, dense and hybrid, build time, index size,
and the fusion that `hybrid` means, chosen on a dev half of the questions and reported on the other half.

Builds one index directory over wiki2015 (../shared/data/wiki2015, beside the checkout) with both parts: BM25 (as
`rise-batch index`) and dense (the offline wordllama embedder over passages, `--retriever hybrid --passages`),
timing each; a kept BM25 part is reused when only the dense part changes. squad_wiki's 4,997 questions (gold =
the article each was written from) are split by query id into a dev and a test half (blake2b of the id, even =
dev: deterministic, independent of file order). Every candidate fusion (rrf at several K, weighted at several W)
is scored on dev from one pair of 1000-deep bm25/dense lists; the chosen one is the best mean recall over K among
those >= bm25 at every K on dev (else the one whose worst K is closest to bm25). Only then is the test half
scored, with bm25, dense, the old default hybrid:rrf:60 and the chosen fusion. Queries where the chosen hybrid
ranks the gold article below a cut-off bm25 makes are listed (the "why" when hybrid < bm25 at some K). Embedding
throughput (docs/s and chars/s on this machine's cores) is projected to 1M documents.

    python -m bench.retrievers                 # builds into bench/scratch/retrievers (kept; --rebuild to redo)
    python -m bench.retrievers --workers 2 --embedder wordllama --passages words:200:50

Writes bench/results/retrievers.json and prints the table.
"""

from __future__ import annotations

import argparse
import hashlib
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
CANDIDATES = tuple(f"hybrid:rrf:{k}" for k in (5, 15, 30, 60, 120)) + tuple(
    f"hybrid:weighted:{w}" for w in (0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
)


def du(paths: list[Path]) -> int:
    return sum(f.stat().st_size for p in paths for f in ([p] if p.is_file() else p.rglob("*")) if f.is_file())


def build(out: Path, workers: int, embedder: str, passages: str, info: dict | None) -> dict:
    """Both parts into `out`; a BM25 part recorded in `info` is kept, only the dense part is (re)built."""
    from rise_batch.index import build_index
    from rise_batch.index.dense import DENSE_DIR, build_dense

    out.parent.mkdir(parents=True, exist_ok=True)
    if info is None or not (out / "meta.json").is_file():
        shutil.rmtree(out, ignore_errors=True)
        t0 = time.perf_counter()
        meta = build_index(WIKI, out, workers=workers, log=lambda m: print(f"  bm25: {m}", flush=True))
        bm25_files = [p for p in out.iterdir() if p.name != DENSE_DIR]
        info = {
            "n_docs": meta.n_docs,
            "n_chars": meta.corpus["n_chars"],
            "bm25": {"build_seconds": round(time.perf_counter() - t0, 1), "bytes": du(bm25_files)},
        }
    shutil.rmtree(out / DENSE_DIR, ignore_errors=True)
    t1 = time.perf_counter()
    log = lambda m: print(f"  dense: {m}", flush=True)  # noqa: E731
    dense = build_dense(WIKI, out, embedder, workers=workers, passages=passages, log=log)
    info["dense"] = {
        "build_seconds": round(time.perf_counter() - t1, 1),
        "embed_seconds": dense["build"]["embed_seconds"],
        "bytes": du([out / DENSE_DIR]),
        "embedder": dense["embedder"],
        "dim": dense["dim"],
        "passages": dense["passages"],
    }
    return info


def half(query_id: str) -> str:
    """ "dev" or "test": a query's half, from a digest of its id (deterministic, independent of file order)."""
    return "dev" if hashlib.blake2b(query_id.encode(), digest_size=8).digest()[-1] % 2 == 0 else "test"


def fuse(name: str, bm25_hits: list, dense_hits: list, k: int) -> list:
    """The hybrid retriever `name`'s top k from 1000-deep bm25 and dense lists (what HybridIndex.search does)."""
    from rise_batch.index.hybrid import rrf, top, weighted
    from rise_batch.index.retriever import parse_retriever

    spec = parse_retriever(name)
    out = []
    for a, b in zip(bm25_hits, dense_hits, strict=True):
        scores = rrf([a, b], spec.rrf_k) if spec.fusion == "rrf" else weighted([a, b], [spec.weight, 1 - spec.weight])
        out.append(top(scores, k))
    return out


def choose(dev: dict[str, dict]) -> str:
    """The candidate >= bm25 at every K with the best mean recall; else the one whose worst K loses least."""

    def margin(name: str) -> float:
        return min(dev[name][str(k)] - dev["bm25"][str(k)] for k in KS)

    def mean(name: str) -> float:
        return sum(dev[name][str(k)] for k in KS) / len(KS)

    safe = [c for c in CANDIDATES if margin(c) >= 0]
    return max(safe, key=mean) if safe else max(CANDIDATES, key=margin)


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
    ap.add_argument("--passages", default=None, help="the dense part's passage rule (default: the index default)")
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--limit", type=int, default=0, help="first N queries only (0 = all)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    run = Run("retrievers", args)
    if not WIKI.is_dir() or not SQUAD.is_file():
        sys.exit(f"retrievers: needs {WIKI} and {SQUAD} (the shared data beside the checkout)")
    from rise_batch.index.passages import parse_passages
    from rise_batch.index.recall import score_recall, search_all
    from rise_batch.index.retriever import open_retriever
    from rise_batch.queries import read_queries

    out = args.scratch
    rule = str(parse_passages(args.passages))
    info_path = out / "bench_build.json"
    info = json.loads(info_path.read_text()) if info_path.is_file() and not args.rebuild else None
    if info is None or info.get("dense", {}).get("passages", {}).get("rule") != rule:
        print(f"building bm25 + dense ({rule}) over {WIKI} into {out} ({args.workers} workers, {os.cpu_count()} cores)")
        info = build(out, args.workers, args.embedder, rule, info)
        info_path.write_text(json.dumps(info, indent=2))
    queries = [q for q in read_queries(SQUAD, ids_optional=True) if q.gold_doc_ids]
    if args.limit:
        queries = queries[: args.limit]
    halves = {h: [i for i, q in enumerate(queries) if half(q.query_id) == h] for h in ("dev", "test")}
    base = {}
    for name in ("bm25", "dense"):
        t0 = time.perf_counter()
        base[name] = search_all(open_retriever(out, name), queries, max(KS), batch=64)
        print(f"  searched {name} in {time.perf_counter() - t0:.0f}s", flush=True)
    t0 = time.perf_counter()
    fused = {c: fuse(c, base["bm25"], base["dense"], max(KS)) for c in CANDIDATES}
    fuse_seconds = time.perf_counter() - t0
    hits_by = {**base, **fused}

    def recall(name: str, which: str) -> dict[str, float]:
        idx = halves[which]
        return score_recall([queries[i] for i in idx], [hits_by[name][i] for i in idx], KS)["summary"]["recall"]

    dev = {name: recall(name, "dev") for name in hits_by}
    chosen = choose(dev)
    test = {name: recall(name, "test") for name in hits_by}
    shown = ["bm25", "dense", "hybrid:rrf:60", chosen]
    for name in shown:
        print(f"  test {name:<22} " + "  ".join(f"R@{k}={test[name][str(k)]:.4f}" for k in KS))
    # where the chosen hybrid ranks gold lower than bm25, on the test half: the per-query evidence for a K it loses
    worse = []
    for i in halves["test"]:
        q = queries[i]
        rb, rd, rh = (ranks_of_gold(hits_by[n][i], q.gold_doc_ids) for n in ("bm25", "dense", chosen))
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
        "split": {h: len(v) for h, v in halves.items()},
        "build": info,
        "embedding_throughput": {
            "docs_per_second": round(docs_s, 1),
            "chars_per_second": round(chars_s),
            "mean_chars_per_doc": round(info["n_chars"] / info["n_docs"]),
            "projected_hours_1m_docs_like_wiki2015": round(1e6 / docs_s / 3600, 2),
            "projected_hours_1m_docs_of_5000_chars": round(1e6 * 5000 / chars_s / 3600, 2),
        },
        "fusion_seconds_all_candidates": round(fuse_seconds, 1),
        "chosen_on_dev": chosen,
        "recall_dev": dev,
        "recall_test": test,
        "hybrid_below_bm25_test": {"n": len(worse), "examples": worse[:10]},
    }
    print()
    print(f"dev {len(halves['dev'])} / test {len(halves['test'])} questions; chosen on dev: {chosen}")
    print("| retriever (test half) | R@10 | R@100 | R@1000 | build s | index MB |")
    print("|---|---|---|---|---|---|")
    for name in shown:
        part = "bm25" if name == "bm25" else "dense" if name == "dense" else None
        secs = info[part]["build_seconds"] if part else info["bm25"]["build_seconds"] + d["build_seconds"]
        size = info[part]["bytes"] if part else info["bm25"]["bytes"] + d["bytes"]
        rec = test[name]
        print(f"| {name} | " + " | ".join(f"{rec[str(k)]:.4f}" for k in KS) + f" | {secs:.0f} | {size / 1e6:.1f} |")
    e = report["embedding_throughput"]
    print(
        f"\nembedding ({d['passages']['rule']}, {d['passages']['n_passages']:,} passages): {e['docs_per_second']} "
        f"docs/s, {e['chars_per_second']:,} chars/s on {os.cpu_count()} cores; 1M wiki2015-sized docs "
        f"~{e['projected_hours_1m_docs_like_wiki2015']} h, "
        f"1M 5k-char docs ~{e['projected_hours_1m_docs_of_5000_chars']} h"
    )
    print(f"{chosen} ranks gold below bm25's cut-off on {len(worse)} test queries; first ones:")
    for w in worse[:5]:
        ranks = f"bm25 #{w['rank_bm25']} dense #{w['rank_dense']} hybrid #{w['rank_hybrid']}"
        print(f"  {w['query_id']}: {ranks}  {w['query']}")
    run.write(report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
