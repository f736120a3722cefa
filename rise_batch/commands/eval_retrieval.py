"""`rise-batch eval-retrieval`: recall@K of gold documents over an index (the paper's gold_R, one sub-query)."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval-retrieval",
        help="recall@K of gold documents for a queries file over a BM25 index",
        description=(
            "For each query (JSONL: query_id, query, gold_doc_ids), search the index with the query text as the "
            "single sub-query and report the mean fraction of gold documents in the top K."
        ),
    )
    p.add_argument("--index", required=True, help="index directory built by `rise-batch index`")
    p.add_argument("--queries", required=True, help="JSONL with query, gold_doc_ids (query_id optional)")
    p.add_argument("--k", default="10,100,1000", help="comma-separated cut-offs (default 10,100,1000)")
    p.add_argument("--out", default=None, help="write per-query results and the summary as JSON")
    p.add_argument("--batch", type=int, default=64, help="queries per search call (default 64)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from rise_batch.index import load_index
    from rise_batch.index.recall import evaluate_recall
    from rise_batch.queries import read_queries

    ks = sorted({int(x) for x in args.k.split(",") if x.strip()})
    if not ks or ks[0] <= 0:
        raise SystemExit("eval-retrieval: --k needs positive integers, e.g. 10,100,1000")
    queries = read_queries(args.queries, ids_optional=True)
    index = load_index(args.index)
    result = evaluate_recall(index, queries, ks, batch=args.batch)
    s = result["summary"]
    print(f"eval-retrieval queries={s['n_queries']} skipped_no_gold={s['n_skipped_no_gold']} index={args.index}")
    for k in ks:
        print(f"  recall@{k:<5d} {s['recall'][str(k)]:.4f}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
        print(f"  wrote {args.out}")
    return 0
