"""`rise-batch index`: build the BM25 index of a corpus, sharded and in parallel (processes, or Ray)."""

from __future__ import annotations

import argparse

from rise_batch.commands.structure import add_columns_flag
from rise_batch.index.build_options import INDEX_OPTIONS
from rise_batch.options import add_layout


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "index",
        help="build the BM25 index (bm25s format, k1=1.5 b=0.75, en stopwords, Snowball stemmer) of a corpus",
        description=(
            "Stream the corpus in shards, tokenize them in parallel and merge them into one bm25s index equal to "
            "stock bm25s's, plus docids.json and meta.json. Memory grows with the index, not with the text."
        ),
    )
    add_layout(p, INDEX_OPTIONS)
    add_columns_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import sys
    import time

    from rise_batch.index import build_index
    from rise_batch.storage import is_local_path, redact

    runner = None
    if args.ray or args.ray_address:
        from rise_batch.executor.probe import Input, check_storage
        from rise_batch.index.shards import RayShardRunner

        runner = RayShardRunner(args.ray_address)
        # every node's tasks read the corpus (a per-node copy is fine); OUT is written by this process alone
        check_storage(args.ray_address, inputs=[Input("the corpus (--corpus)", args.corpus, "corpus")])
    if not 0 <= args.gpus < float("inf"):
        from rise_batch.errors import ConfigError

        raise ConfigError(f"--gpus must be a finite number >= 0, got {args.gpus}")
    t0 = time.perf_counter()
    if args.retriever != "bm25" and not is_local_path(args.out):
        return publish_built(args)
    if args.passages is not None:
        from rise_batch.index.passages import parse_passages

        parse_passages(args.passages)  # a bad rule stops here, before any build
    if args.retriever == "dense":
        return build_dense_only(args)
    if args.retriever == "hybrid" and remote_embedding(args) is None:
        from rise_batch.index.embedders import load_embedder

        load_embedder(args.embedder)  # a missing extra or unknown model stops here, before the BM25 build
    meta = build_index(  # an existing --out without --overwrite: FileExistsError, exit 2 (rise_batch.errors)
        args.corpus,
        args.out,
        workers=args.workers,
        shard_docs=args.shard_docs,
        on_bad_row=args.on_bad_row,
        runner=runner,
        overwrite=args.overwrite,
        columns=args.columns or "",
        log=lambda msg: print(f"index: {msg}", file=sys.stderr),
        progress=args.progress,
    )
    c = meta.counts
    print(
        f"index docs={c['n_docs']} terms={c['n_terms']} postings={c['n_postings']} "
        f"bad_rows={meta.corpus['n_bad_rows']} seconds={time.perf_counter() - t0:.1f} out={redact(args.out)}"
    )
    if args.retriever == "hybrid":
        dense_part(args)
    print_queries(args)
    return 0


def publish_built(args: argparse.Namespace) -> int:
    """A dense or hybrid index into object storage: built whole on this machine's disk as for a local --out, then
    published object by object with its done marker last (meta.json of the BM25 part for hybrid, dense/meta.json for
    dense alone), so a reader that finds the marker finds every part; an existing one is refused unless
    --overwrite, as on disk."""
    import shutil
    import sys
    import tempfile
    from pathlib import Path

    from rise_batch.index.search import index_marker
    from rise_batch.storage import location, publish_tree, redact

    dest = location(args.out)
    if dest.exists() and dest.list(recursive=True) and not args.overwrite:
        raise FileExistsError(f"{redact(dest)}: exists and is not empty (pass --overwrite to replace it)")
    tmp = Path(tempfile.mkdtemp(prefix="rise-index-"))
    try:
        built = argparse.Namespace(**{**vars(args), "out": str(tmp / "index"), "query": None})
        run(built)
        publish_tree(tmp / "index", dest, index_marker(tmp / "index"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"index {args.retriever} published out={redact(dest)}", file=sys.stderr)
    print_queries(args)
    return 0


def dense_part(args: argparse.Namespace) -> dict:
    """Embed the corpus into OUT/dense with the same shards, bad-row policy and runner choice as the BM25 part."""
    import sys

    from rise_batch.index.dense import build_dense

    ray = {"address": args.ray_address, "num_gpus": args.gpus} if args.ray or args.ray_address else None
    remote = remote_embedding(args)
    meta = build_dense(
        args.corpus,
        args.out,
        args.embedder,
        workers=args.workers,
        shard_docs=args.shard_docs,
        on_bad_row=args.on_bad_row,
        columns=args.columns or "",
        ray=ray,
        log=lambda msg: print(f"index: {msg}", file=sys.stderr),
        passages=args.passages,
        remote=remote,
    )
    b = meta["build"]
    print(
        f"index dense docs={meta['n_docs']} passages={meta['passages']['rule']} "
        f"n_passages={meta['passages']['n_passages']} embedder={meta['embedder']} dim={meta['dim']} "
        f"docs_per_second={b['docs_per_second']} seconds={b['seconds']:.1f} out={args.out}"
        + (f" requests={b['requests']} cost_usd={b['cost_usd']:.6f}" if "cost_usd" in b else "")
    )
    return meta


def remote_embedding(args: argparse.Namespace) -> dict | None:
    """What a remote embedder (`openai:MODEL`) is loaded with: its endpoint (--base-url, the key's variable, the
    limits, checked now), the --max-cost budget (what finished shards of a killed build paid counts as spent),
    the inputs per request. None for a local embedder."""
    from rise_batch.index.dense_checkpoint import recorded_cost
    from rise_batch.index.embed_remote import endpoint_config
    from rise_batch.index.embedders import EMBEDDERS, parse_embedder

    spec = parse_embedder(args.embedder)
    if not EMBEDDERS.lookup(spec.kind).remote:
        return None
    if args.embed_batch < 1:
        from rise_batch.errors import ConfigError

        raise ConfigError(f"--embed-batch must be >= 1, got {args.embed_batch}")
    limits = {"rpm": args.rpm, "tpm": args.tpm, "concurrency": args.concurrency}
    endpoint = endpoint_config(args.base_url, spec.name, args.api_key_env, **limits)
    budget = None
    if args.max_cost_usd is not None:
        from rise_batch.llm.pricing import PriceTable
        from rise_batch.llm.spend import CostBudget

        if not args.max_cost_usd > 0:
            from rise_batch.errors import ConfigError

            raise ConfigError(f"--max-cost must be > 0, got {args.max_cost_usd}")
        PriceTable.load().require(spec.name, f"--max-cost {args.max_cost_usd:g}")
        budget = CostBudget(args.max_cost_usd, recorded_cost(args.out))
    return {"endpoint": endpoint, "budget": budget, "batch": args.embed_batch}


def build_dense_only(args: argparse.Namespace) -> int:
    """--retriever dense: a directory with docids.json and dense/ only (no BM25 part)."""
    import shutil
    from pathlib import Path

    from rise_batch.index.dense_checkpoint import PARTIAL_DIR

    out = Path(args.out)
    if out.exists() and any(p.name != PARTIAL_DIR for p in out.iterdir()):  # finished shards alone: resumed
        if not args.overwrite:
            raise FileExistsError(f"{out}: exists and is not empty (pass overwrite=True / --overwrite to replace it)")
        shutil.rmtree(out)
    dense_part(args)
    print_queries(args)
    return 0


def print_queries(args: argparse.Namespace) -> None:
    """--query: the top 5 hits of each query with the retriever just built."""
    from rise_batch.index.retriever import open_retriever

    if args.query:
        results = open_retriever(args.out, args.retriever).search(args.query, 5)
        titles = hit_titles(args.corpus, args.columns or "", {d for hits in results for d in hits.docids})
        for q, hits in zip(args.query, results, strict=True):
            print(f"query: {q}")
            for d, s in zip(hits.docids, hits.scores, strict=True):
                print(f"  {s:8.3f}  {d}  {titles.get(d, '')}".rstrip())


def hit_titles(corpus: str, columns: str, docids: set[str]) -> dict[str, str]:
    """Titles of the hit documents, read back from the corpus: the index keeps docids only, and a docid alone does
    not tell a user whether the hit makes sense. The title column, else the frontmatter title, else the url; the
    read stops once every hit is found."""
    from rise_batch.corpus.docmap import frontmatter_title
    from rise_batch.corpus.readers import iter_docs

    titles: dict[str, str] = {}
    for doc in iter_docs(corpus, on_bad_row="skip", columns=columns):
        if doc.docid in docids and doc.docid not in titles:
            titles[doc.docid] = doc.title or frontmatter_title(doc.text) or doc.url or ""
            if len(titles) == len(docids):
                break
    return titles
