"""`rise-batch index`'s settings, one field each (rise_batch/options.py): the flags, docs/retrieval.md's table and
build_index's defaults are made from them."""

from __future__ import annotations

from dataclasses import dataclass

from rise_batch.config import LLMConfig, StructureConfig
from rise_batch.index.embedders import embedders_help
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
        help=lambda: "dense/hybrid, optionally @max_tokens: " + embedders_help(),
        shown="wordllama",
    )
    base_url: str | None = same_as(LLMConfig, "base_url", help="a remote embedder's OpenAI-compatible base URL")
    api_key_env: str = same_as(LLMConfig, "api_key_env")
    concurrency: int = same_as(LLMConfig, "concurrency", help="a remote embedder's requests in flight")
    rpm: int = same_as(LLMConfig, "rpm", help="a remote embedder's requests per minute")
    tpm: int = same_as(LLMConfig, "tpm", help="a remote embedder's tokens per minute")
    embed_batch: int = option(32, help="a remote embedder's inputs per request (TEI takes 32 by default)")
    max_cost_usd: float | None = same_as(
        StructureConfig,
        "max_cost_usd",
        help="a remote embedder: stop cleanly (exit code 3) before the build's total cost would pass USD; "
        "finished shards are kept, re-run with more to continue",
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
                *("base_url", "api_key_env", "concurrency", "rpm", "tpm", "embed_batch", "max_cost_usd"),
            ),
        ),
    ),
    from_file=False,
)
