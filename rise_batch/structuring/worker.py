"""One structure worker: builds its backend (and LLM client) once, then structures whole shards.

The executor builds it from its path (`rise_batch.structuring.worker:ShardWorker`) inside each worker, in this
process for `--workers 0` or in each Ray actor, so nothing heavy is pickled to it. A worker receives shard specs (a
file name and a row range), never documents. Re-running a shard is safe: it resumes from its own checkpoint parts,
which is what lets the executor resubmit the shards of a dead worker.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from rise_batch.config import StructureConfig
from rise_batch.corpus.readers import ShardSpec
from rise_batch.llm.tokens import counter_for
from rise_batch.registry import BACKENDS
from rise_batch.storage import location
from rise_batch.structure.backends import HeuristicBackend, LLMBackend
from rise_batch.structure.propose import TOC_RESPONSE_FORMAT
from rise_batch.structure.tier import TieredBackend
from rise_batch.structuring.budget import CostBudget, spent_so_far, structuring_estimator
from rise_batch.structuring.shard import structure_shard
from rise_batch.structuring.stats import OnDoc, ShardCount, ShardReport, WorkerProgress
from rise_batch.tier_rule import tier_rule


def make_backend(cfg: StructureConfig, prompt_text: str, limiter=None):
    """The backend a worker uses (its factory in rise_batch.registry.BACKENDS); built inside the worker so nothing
    heavy is pickled to it."""
    return BACKENDS[cfg.backend].factory(cfg, prompt_text, limiter)


def heuristic_backend(cfg: StructureConfig, prompt_text: str, limiter=None) -> HeuristicBackend:
    """The free, offline backend: needs neither the prompt nor a limiter."""
    del cfg, prompt_text, limiter
    return HeuristicBackend()


def llm_backend(cfg: StructureConfig, prompt_text: str, limiter=None):
    """The LLM backend on its client, behind the cost guard when --max-cost is set, tiered when a rule is set."""
    from rise_batch.llm.client import client_from_config  # lazy: loads openai, aiohttp, tenacity (~4 s)

    client = client_from_config(cfg.llm, limiter=limiter, response_format=TOC_RESPONSE_FORMAT, out=cfg.out)
    chat = client.chat
    if cfg.max_cost_usd is not None:  # each Ray actor guards an equal share of what is left
        spent = spent_so_far(cfg.out)
        share = spent + (cfg.max_cost_usd - spent) / cfg.n_workers if cfg.n_workers > 1 else None
        budget = CostBudget(cfg.max_cost_usd, spent, share)
        estimate = structuring_estimator(cfg.llm.model, client.prices, max_output_tokens=cfg.llm.max_output_tokens)
        chat = budget.guard(chat, estimate)
    backend = LLMBackend(chat, prompt_text, reask=cfg.llm.reask, max_input_chars=cfg.llm.max_input_chars,
                         max_input_tokens=cfg.llm.max_input_tokens, counter=counter_for(cfg.llm.model))  # fmt: skip
    rule = tier_rule(cfg.tier)  # the same routing batch mode and the cost plan use (tier_rule.goes_to_llm)
    if rule is not None:
        backend = TieredBackend(backend, rule)
    backend.client = client  # type: ignore[attr-defined]  # for transport stats and closing
    return backend


def transport_stats(backend) -> dict:
    """HTTP-level counters (attempts, retries, 429s, timeouts) of one worker's client; {} for the heuristic."""
    client = getattr(backend, "client", None)
    if client is None:
        return {}
    d = client.stats.as_dict()
    return {k: v for k, v in d.items() if k not in ("input_tokens", "cached_input_tokens", "output_tokens", "cost_usd")}


class ShardWorker:
    """config: {"cfg": StructureConfig, "prompt_text", "run_hash"}; services: {"limiter": actor name} on Ray,
    {"on_doc": progress callback} in process. On Ray the driver asks `progress()` every few seconds instead: the
    documents, earlier-run documents and dollars of each running shard so far, and the retries and 429s since the
    last report."""

    def __init__(self, config: Mapping[str, Any], services: Mapping[str, Any]) -> None:
        self.cfg: StructureConfig = config["cfg"]
        self.run_hash: str = config["run_hash"]
        for uri in (self.cfg.corpus, self.cfg.out):  # a URI's options (endpoint, keys) serve the names a shard
            location(uri)  # spec or a manifest records without them (storage.location remembers them per bucket)
        limiter = None
        if services.get("limiter"):
            from rise_batch.llm.limiter_actor import RemoteLimiter  # lazy: loads ray (Ray runs only)

            limiter = RemoteLimiter(services["limiter"], self.cfg.llm.concurrency)
        self.backend = make_backend(self.cfg, config["prompt_text"], limiter)
        self.on_doc: OnDoc | None = services.get("on_doc")
        self.reported: dict = {}
        self.running: dict[int, ShardCount] = {}  # shard id -> its documents so far (Ray: read by progress())

    async def run(self, spec: ShardSpec, attempt: int) -> ShardReport:
        """The shard's stats, with the retries and 429s this worker's client counted since its previous report, so
        the driver's progress line can show them while the job runs."""
        del attempt  # a shard resumes from its checkpoint, whichever attempt this is
        on_doc = self.on_doc
        if on_doc is None:
            on_doc = self.running[spec.shard_id] = ShardCount()
        try:
            stats = await structure_shard(self.cfg, spec, self.backend, self.run_hash, on_doc)
        finally:
            self.running.pop(spec.shard_id, None)
        return ShardReport(stats, *self.transport_delta())

    async def progress(self) -> WorkerProgress:
        """Each running shard's counts so far, and this worker's retries and 429s since its last report."""
        shards = {sid: dataclasses.replace(c) for sid, c in self.running.items()}
        return WorkerProgress(shards, *self.transport_delta())

    def transport_delta(self) -> tuple[int, int]:
        """(retries, 429s) this worker's client counted since its previous report."""
        now = transport_stats(self.backend)
        retries, limited = (now.get(k, 0) - self.reported.get(k, 0) for k in ("retries", "rate_limited"))
        self.reported = now
        return retries, limited

    async def close(self) -> dict:
        """The transport stats, then the client closed in this worker's own event loop (its aiohttp session's)."""
        stats = transport_stats(self.backend)
        client = getattr(self.backend, "client", None)
        if client is not None:
            await client.aclose()
        return stats


def describe_shard(spec: ShardSpec) -> str:
    return f"shard {spec.shard_id} ({spec.source} rows {spec.start}-{spec.stop})"


class ShardProgress:
    """The driver's side of the progress line of structure: documents, dollars, retries and 429s as they come.

    In process each document is counted as it finishes (`on_doc`, the worker's service). On Ray the executor asks
    every busy worker where its shards stand every few seconds (`on_progress`); a shard's result then closes its
    count (`on_result`). Both go through `Progress.item`, which adds only what passes the most shown for the
    shard, so a late report, or a shard redone from the start after its worker died, never counts a document or
    a dollar twice: the line never passes the total and ends on the real count."""

    def __init__(self, bar, local: bool) -> None:
        self.bar, self.local = bar, local

    def on_doc(self, n: int, usd: float, earlier: bool = False) -> None:
        if earlier:  # a document an earlier run checkpointed: done, but not this run's rate (nor its ETA)
            self.bar.earlier(n)
        else:
            self.bar.update(n, cost=usd)

    def on_progress(self, report: WorkerProgress) -> None:
        """A Ray worker's report: its shards' counts so far, its retries and 429s since the last."""
        self.bar.update(0, retries=report.retries, rate_limited=report.rate_limited)
        for sid, c in report.shards.items():
            self.bar.item(sid, c.done, earlier=c.earlier, cost=c.cost)

    def on_result(self, spec: ShardSpec, report: ShardReport) -> None:
        """A shard's final stats: a shard an earlier run finished counts whole as done before; on Ray the rest
        settles what its reports showed; in process every document was counted as it finished."""
        self.bar.update(0, retries=report.retries, rate_limited=report.rate_limited)
        stats = report.stats
        if self.local and not stats.shards_resumed:
            return
        total = stats.docs_total  # 0 for a shard that left documents undone (rows not counted): its reports stand
        earlier = total if stats.shards_resumed else stats.docs_resumed or 0
        cost = stats.cost_usd + (stats.rebought_cost_usd or 0.0)  # replies bought twice cost twice
        self.bar.item(spec.shard_id, total - earlier, earlier=earlier, cost=cost)


def shard_services(cfg: StructureConfig, run_hash: str, on_doc: OnDoc):
    """What every worker shares: in process, the per-document progress callback; on Ray, the job's limiter actor
    (LLM backend only), whose handle the executor holds until every shard is done."""

    def services(kind: str) -> tuple[dict[str, Any], Any]:
        if kind == "local":
            return {"on_doc": on_doc}, None
        if not cfg.calls_llm:
            return {}, None
        from rise_batch.llm.limiter_actor import start_limiter  # lazy: loads ray (Ray runs only)

        name, handle = start_limiter(cfg.llm, run_hash)
        return {"limiter": name}, handle

    return services
