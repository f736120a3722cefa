"""`rise-batch index`: build the parts of an index a retriever opens (BM25's by default), sharded and in parallel
(processes, or Ray). Which parts, and how each is built, is the retriever registry's
(rise_batch/index/retriever_kinds.py); this command only stages, checks and publishes the directory."""

from __future__ import annotations

import argparse

from rise_batch.commands.structure import add_columns_flag
from rise_batch.dirlock import claim, holding
from rise_batch.index.build_options import INDEX_OPTIONS
from rise_batch.options import add_layout


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "index",
        help="build an index of a corpus: the parts --retriever opens (BM25 by default: bm25s format, k1=1.5 "
        "b=0.75, en stopwords, Snowball stemmer)",
        description=(
            "Stream the corpus in shards and build the parts the retriever opens, in parallel: BM25's tokenized "
            "and merged into one bm25s index equal to stock bm25s's, a dense part embedded. Every index holds "
            "docids.json (row -> docid) beside its parts' files. Memory grows with the index, not with the text."
        ),
    )
    add_layout(p, INDEX_OPTIONS)
    add_columns_flag(p)
    p.set_defaults(func=run)


@holding("rise-batch index")
def run(args: argparse.Namespace) -> int:
    import shutil
    import sys
    from pathlib import Path

    from rise_batch.index.dense_checkpoint import PARTIAL_DIR
    from rise_batch.index.retriever_kinds import DOCIDS_FILE, PARTS, RETRIEVERS, PartBuild
    from rise_batch.storage import is_local_path, redact

    kind = RETRIEVERS.lookup(args.retriever)
    if not is_local_path(args.out):
        return publish_built(args)  # built on this machine's disk by this function, then published
    if args.ray or args.ray_address:
        from rise_batch.executor.probe import Input, check_storage

        # every node's tasks read the corpus (a per-node copy is fine); OUT is written by this process alone
        check_storage(args.ray_address, inputs=[Input("the corpus (--corpus)", args.corpus, "corpus")])
    if not 0 <= args.gpus < float("inf"):
        from rise_batch.errors import ConfigError

        raise ConfigError(f"--gpus must be a finite number >= 0, got {args.gpus}")
    claim(args.out, beside=True)  # one writer; beside OUT, which is replaced whole when the index is built
    if args.passages is not None:
        from rise_batch.index.passages import parse_passages

        parse_passages(args.passages)  # a bad rule stops here, before any build
    out = Path(args.out)
    if out.exists() and any(out.iterdir()) and not args.overwrite:
        raise FileExistsError(f"{out}: exists and is not empty (pass --overwrite to replace it)")
    parts = [PARTS[name] for name in kind.parts]
    for part in parts:
        if part.check is not None:
            part.check(args)  # a missing extra or a bad setting stops here, before any part is built
    # one stage per OUT (the lock above makes this command its only writer): a killed build leaves its finished
    # dense shards there (index/dense_checkpoint.py), which the same command run again embeds no more
    stage = out.parent / f".{out.name}.building"
    if stage.is_dir():
        for leftover in stage.iterdir():
            if leftover.name != PARTIAL_DIR:
                shutil.rmtree(leftover) if leftover.is_dir() and not leftover.is_symlink() else leftover.unlink()
    job = PartBuild(
        corpus=args.corpus,
        out=str(stage),
        workers=args.workers,
        shard_docs=args.shard_docs,
        on_bad_row=args.on_bad_row,
        columns=args.columns or "",
        ray_address=(args.ray_address or "") if args.ray or args.ray_address else None,
        log=lambda msg: print(f"index: {msg}", file=sys.stderr),
        args=args,
    )
    try:
        for part in parts:
            print(f"{part.build(job)} out={redact(getattr(args, 'published_to', None) or args.out)}")
        if not (stage / DOCIDS_FILE).is_file():
            raise ValueError(
                f"retriever {kind.name}: its parts ({', '.join(kind.parts)}) wrote no {DOCIDS_FILE}; every index "
                "holds one (row -> docid), see rise_batch/index/retriever_kinds.py"
            )
        shutil.rmtree(stage / PARTIAL_DIR, ignore_errors=True)  # the build is whole: its shards are in it
        if out.exists():
            shutil.rmtree(out)
        stage.rename(out)  # a reader never sees half an index
    except BaseException:
        if not (stage / PARTIAL_DIR).is_dir():  # nothing a re-run could take up
            shutil.rmtree(stage, ignore_errors=True)
        raise
    print_queries(args)
    return 0


def publish_built(args: argparse.Namespace) -> int:
    """An index into object storage: built whole on this machine's disk as for a local --out, then published object
    by object with the sums a node's cached copy is checked against and its done marker last
    (retriever_kinds.index_marker), so a reader that finds the marker finds every part; an existing one is refused
    unless --overwrite, as on disk."""
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
        built = argparse.Namespace(**{**vars(args), "out": str(tmp / "index"), "query": None, "published_to": args.out})
        run(built)
        publish_tree(tmp / "index", dest, index_marker(tmp / "index"), sums=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"index {args.retriever} published out={redact(dest)}", file=sys.stderr)
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
