"""`rise-batch eval-retrieval`: recall@K of gold documents over an index (the paper's gold_R, one sub-query)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from rise_batch.index.retriever_kinds import spec_help
from rise_batch.option_paths import URI
from rise_batch.options import Entry, Layout, Section, add_layout, option


@dataclass(frozen=True)
class EvalRetrievalOptions:
    """`eval-retrieval`'s settings (its flags and docs/retrieval.md's table)."""

    index: str = option("", path=URI, help="index directory built by `rise-batch index`")
    queries: str = option("", path=URI, help="query file with query and gold (query_id optional)")
    gold: str = option(
        "gold",
        choices=["gold", "evidence"],
        help="which documents of the query file are gold: gold_docs/gold_doc_ids or evidence_docs/evidence_doc_ids "
        "(what BrowseComp-Plus scores retrieval against)",
    )
    qrels: str | None = option(
        None, path=URI, help="TREC qrels file (`qid iter docid rel`, rel > 0 is gold); replaces --gold"
    )
    trec_run: str | None = option(
        None, metavar="FILE", path=URI, help="also write every query's top max(K) as `qid Q0 docid rank score tag`"
    )
    retriever: str | None = option(
        None,
        help=spec_help,
        shown="the first registered retriever whose parts the index holds (bm25, else dense)",
    )
    embedder: str | None = option(
        None, help="dense/hybrid: must match the index's model", shown="the index's recorded model"
    )
    tag: str | None = option(None, help="run tag of --trec-run lines", shown="rise-batch-<retriever>")
    k: str = option("10,100,1000", help="comma-separated cut-offs")
    out: str | None = option(None, path=URI, help="write per-query results and the summary as JSON")
    batch: int = option(64, help="queries per search call")


EVAL_RETRIEVAL_OPTIONS = Layout(
    EvalRetrievalOptions,
    (
        Section(
            None,
            (
                *(Entry("index", required=True), Entry("queries", required=True), "gold", "qrels", "trec_run"),
                *("retriever", "embedder", "tag", "k", "out", "batch"),
            ),
        ),
    ),
    from_file=False,
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval-retrieval",
        help="recall@K of gold documents for a queries file over an index, with any registered retriever",
        description=(
            "For each query (JSONL, JSONL.gz, TSV or a .json list: query_id, query, gold_doc_ids or BrowseComp-Plus "
            "gold_docs / evidence_docs), search the index with the query text as the single sub-query and report "
            "the mean fraction of gold documents in the top K. --qrels takes the gold from a TREC qrels file "
            "instead; --trec-run writes the ranking for trec_eval-style tools."
        ),
    )
    add_layout(p, EVAL_RETRIEVAL_OPTIONS)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rise_batch.eval.export import write_trec_run
    from rise_batch.index.recall import score_recall, search_all
    from rise_batch.index.retriever import default_retriever, open_retriever, parse_retriever
    from rise_batch.io import write_json_atomic
    from rise_batch.queries import QueryFileError, gold_label, read_queries, select_gold

    ks = sorted({int(x) for x in args.k.split(",") if x.strip()})
    if not ks or ks[0] <= 0:
        raise SystemExit("eval-retrieval: --k needs positive integers, e.g. 10,100,1000")
    queries = select_gold(read_queries(args.queries, ids_optional=True), args.gold, args.qrels, args.queries)
    searched = queries if args.trec_run else [q for q in queries if q.gold_doc_ids]
    if not searched:
        other = "evidence" if args.gold == "gold" else "gold"
        raise QueryFileError(
            f"{args.queries}: no query has {gold_label(args.gold, args.qrels)} to score (--gold {other} or --qrels "
            "FILE gives gold from elsewhere); nothing was measured"
        )
    retriever = parse_retriever(args.retriever or default_retriever(args.index))
    index = open_retriever(args.index, retriever, embedder=args.embedder)
    hits = search_all(index, searched, ks[-1], batch=args.batch)
    result = score_recall(searched, hits, ks)
    s = result["summary"]
    s["n_skipped_no_gold"] = len(queries) - s["n_queries"]
    s["gold"] = gold_label(args.gold, args.qrels)
    s["retriever"] = str(retriever)
    print(
        f"eval-retrieval queries={s['n_queries']} skipped_no_gold={s['n_skipped_no_gold']} gold={s['gold']} "
        f"retriever={retriever} index={args.index}"
    )
    for k in ks:
        value = s["recall"][str(k)]
        print(f"  recall@{k:<5d} " + ("–" if value is None else f"{value:.4f}"))
    if args.trec_run:
        n = write_trec_run(
            args.trec_run,
            ((q.query_id, h.docids, h.scores) for q, h in zip(searched, hits, strict=True)),
            args.tag or f"rise-batch-{str(retriever).replace(':', '-')}",
        )
        print(f"  wrote {args.trec_run} ({n} lines, {len(searched)} queries)")
    if args.out:
        write_json_atomic(args.out, result, indent=2)  # a path or a URI (one PUT)
        print(f"  wrote {args.out}")
    return 0
