"""The hooks of the registered index parts and retrievers (rise_batch/index/retriever_kinds.py names them lazily):
how `rise-batch index` builds the bm25 and dense parts, and how bm25, dense and hybrid open an index directory.

They live apart from the registry so that reading it (option help, choices) loads no index code: this module is
imported by the first hook called.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rise_batch.errors import ConfigError
from rise_batch.index.build import build_index
from rise_batch.index.dense import DenseIndex, build_dense
from rise_batch.index.dense_checkpoint import recorded_cost
from rise_batch.index.embed_remote import endpoint_config
from rise_batch.index.embedders import EMBEDDERS, load_embedder, parse_embedder
from rise_batch.index.hybrid import HybridIndex
from rise_batch.index.retriever_kinds import PartBuild
from rise_batch.index.search import load_index
from rise_batch.index.shards import RayShardRunner
from rise_batch.llm.pricing import PriceTable
from rise_batch.llm.spend import CostBudget


def build_bm25(job: PartBuild) -> str:
    """The bm25 part: the corpus tokenized in shards (processes, or Ray tasks with --ray) and merged."""
    t0 = time.perf_counter()
    runner = None
    if job.ray_address is not None:
        runner = RayShardRunner(job.ray_address or None)
    meta = build_index(
        job.corpus,
        job.out,
        workers=job.workers,
        shard_docs=job.shard_docs,
        on_bad_row=job.on_bad_row,
        runner=runner,
        columns=job.columns,
        log=job.log,
        progress=job.args.progress,
    )
    c = meta.counts
    return (
        f"index docs={c['n_docs']} terms={c['n_terms']} postings={c['n_postings']} "
        f"bad_rows={meta.corpus['n_bad_rows']} seconds={time.perf_counter() - t0:.1f}"
    )


def check_dense(args: Any) -> None:
    """A missing extra, an unknown model or a bad endpoint stops the build before any part (the BM25 part of hybrid
    included)."""
    if remote_embedding(args, None) is None:
        load_embedder(args.embedder)


def remote_embedding(args: Any, out: str | Path | None) -> dict[str, Any] | None:
    """What a remote embedder (`openai:MODEL`) is loaded with: its endpoint (--base-url, the key's variable, the
    limits, checked now), the --max-cost budget (what the finished shards of a killed build at `out` paid counts as
    spent), the inputs per request. None for a local embedder."""
    spec = parse_embedder(args.embedder)
    if not EMBEDDERS.lookup(spec.kind).remote:
        return None
    if args.embed_batch < 1:
        raise ConfigError(f"--embed-batch must be >= 1, got {args.embed_batch}")
    limits = {"rpm": args.rpm, "tpm": args.tpm, "concurrency": args.concurrency}
    endpoint = endpoint_config(args.base_url, spec.name, args.api_key_env, **limits)
    budget = None
    if args.max_cost_usd is not None:
        if not args.max_cost_usd > 0:
            raise ConfigError(f"--max-cost must be > 0, got {args.max_cost_usd}")
        PriceTable.load().require(spec.name, f"--max-cost {args.max_cost_usd:g}")
        budget = CostBudget(args.max_cost_usd, recorded_cost(out) if out is not None else 0.0)
    return {"endpoint": endpoint, "budget": budget, "batch": args.embed_batch}


def build_dense_part(job: PartBuild) -> str:
    """The dense part: the corpus embedded into OUT/dense with the same shards, bad-row policy and runner choice as
    the BM25 part (it writes docids.json when no part before it did, and checks it against its rows otherwise)."""
    ray = {"address": job.ray_address or None, "num_gpus": job.args.gpus} if job.ray_address is not None else None
    meta = build_dense(
        job.corpus,
        job.out,
        job.args.embedder,
        workers=job.workers,
        shard_docs=job.shard_docs,
        on_bad_row=job.on_bad_row,
        columns=job.columns,
        ray=ray,
        log=job.log,
        passages=job.args.passages,
        remote=remote_embedding(job.args, job.out),
    )
    b = meta["build"]
    return (
        f"index dense docs={meta['n_docs']} passages={meta['passages']['rule']} "
        f"n_passages={meta['passages']['n_passages']} embedder={meta['embedder']} dim={meta['dim']} "
        f"docs_per_second={b['docs_per_second']} seconds={b['seconds']:.1f}"
        + (f" requests={b['requests']} cost_usd={b['cost_usd']:.6f}" if "cost_usd" in b else "")
    )


def open_bm25(index_dir: str | Path, spec: Any, *, backend: str = "auto", embedder: Any = None, **kw: Any) -> Any:
    """The BM25 part, memory-mapped (`kw`: BM25Index's own settings, e.g. threads)."""
    return load_index(index_dir, backend=backend, **kw)


def open_dense(index_dir: str | Path, spec: Any, *, embedder: Any = None, **_: Any) -> Any:
    """The dense part; `embedder`, when given, must match the model the index recorded."""
    return DenseIndex(index_dir, embedder=embedder)


def open_hybrid(index_dir: str | Path, spec: Any, **kw: Any) -> Any:
    """Both parts, fused as the spec says (rise_batch/index/hybrid.py)."""
    return HybridIndex(open_bm25(index_dir, spec, **kw), open_dense(index_dir, spec, **kw), *spec.fusion_args())
