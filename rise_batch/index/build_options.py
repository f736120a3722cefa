"""`rise-batch index`'s settings, one field each (rise_batch/options.py): the flags, docs/retrieval.md's table and
build_index's defaults are made from them."""

from __future__ import annotations

from dataclasses import dataclass

from rise_batch.config import StructureConfig
from rise_batch.index.passages import DEFAULT_PASSAGES
from rise_batch.index.retriever_kinds import RETRIEVERS
from rise_batch.option_paths import URI
from rise_batch.options import Entry, Layout, Section, option, same_as


@dataclass(frozen=True)
class IndexOptions:
    corpus: str = same_as(StructureConfig, "corpus")
    out: str = option("", path=URI, help="index directory to create (a path or a URI)")
    workers: int = option(2, help="tokenizer processes")
    shard_docs: int = option(2000, help="documents per shard")
    on_bad_row: str = same_as(StructureConfig, "on_bad_row", help="bad rows/duplicates policy")
    ray: bool = option(False, help="tokenize shards as Ray tasks (local Ray if no address)")
    ray_address: str | None = option(None, help="Ray cluster address (implies --ray)")
    overwrite: bool = option(False, help="replace an existing index directory")
    retriever: str = option(
        "bm25",
        choices=lambda: list(RETRIEVERS),
        help=lambda: (
            "what to build (the parts each retriever opens): "
            + ", ".join(f"{r.name} ({' + '.join(r.parts)})" for r in RETRIEVERS.values())
        ),
    )
    embedder: str | None = option(
        None,
        help="dense/hybrid: wordllama[:config[:dim]][@max_tokens] (offline; extra .[dense]) or st:/model/dir",
        shown="wordllama",
    )
    passages: str | None = option(
        None,
        help="dense/hybrid: what gets one vector, doc (the whole document) or words:N:O (windows of N words "
        "overlapping by O, a document scored by its best passage)",
        shown=DEFAULT_PASSAGES,
    )
    gpus: float = option(0.0, help="dense with --ray: GPUs asked of every embedding task")
    progress: bool = option(True, help="no progress bar or lines")
    query: list[str] = option(
        default_factory=list,
        repeatable=True,
        help="after building, print the top 5 hits of QUERY (score, docid, title; repeatable)",
    )


INDEX_OPTIONS = Layout(
    IndexOptions,
    (
        Section(
            None,
            (
                *(Entry("corpus", required=True), Entry("out", required=True), "workers", "shard_docs", "on_bad_row"),
                *("ray", "ray_address", "overwrite", "retriever", "embedder", "passages", "gpus", "progress", "query"),
            ),
        ),
    ),
    from_file=False,
)
