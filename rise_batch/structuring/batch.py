"""`structure --mode batch`: the same documents, messages, validation, rendering and checkpoint as online mode, with
the model calls made through the OpenAI Batch API at half price.

Shards of the job's plan are grouped into *packs* of whole shards, about one input file each (<= 50,000 requests,
<= 200 MB). A pack goes through rounds: round 0 carries every document's first request; a later round carries what
the previous one left open, re-asks (unparseable or all-anchors-failed replies) and failed or expired lines, when
`batch.retry` is "batch". With "online" (the default) those go through the online client at once and a pack needs
one round.

Each document is processed by *replaying* the online backend (`LLMBackend.structure`) with a chat that answers call
n from the collected batch results (custom_id `<shard>:<docid>|<call>|<try>`); a call with no answer yet raises
`Deferred`, which becomes a request line of the next round. So request bodies, re-ask turns, validation and
checkpoint rows are those of online mode by construction, not by imitation.

Structured outputs: request lines carry the TOC schema as `response_format` while it is on. Lines a provider
refuses for it (llm/errors.refuses_response_format) are sent again without it, online or in the next round, and
every later line goes without it; each group's manifest entry records whether its lines carried it, so results
are marked schema-constrained (or not) correctly, and a resume keeps the switch.

Resume: the BatchRunner manifest (OUT/batches.json) records every pack's groups, batches and states, results are
downloaded once into OUT/batches/, and checkpointed documents are skipped; a driver killed at any point between
submit and collect polls again instead of resubmitting.
"""

from __future__ import annotations

import asyncio
import hashlib
import sys
from collections import Counter, deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rise_batch.config import ConfigError, StructureConfig
from rise_batch.corpus.readers import ShardSpec, read_shard
from rise_batch.io import read_json
from rise_batch.llm.batch import BatchResult, reply_from_body, request_line
from rise_batch.llm.batch_runner import BatchRunner, async_client
from rise_batch.llm.errors import LLMError, refuses_response_format
from rise_batch.llm.pricing import PriceTable
from rise_batch.llm.tokens import counter_for
from rise_batch.structure.backends import HeuristicBackend, LLMBackend
from rise_batch.structure.propose import TOC_RESPONSE_FORMAT
from rise_batch.structuring.budget import BudgetExceeded, CostBudget, checkpoint_cost, structuring_estimator
from rise_batch.structuring.checkpoint import CheckpointStore
from rise_batch.structuring.plan import request_cost
from rise_batch.structuring.shard import finish_shard
from rise_batch.structuring.stats import ShardStats
from rise_batch.tier_rule import goes_to_llm, tier_rule
from rise_batch.types import Doc, DocResult, Reply

MANIFEST = "batches.json"


class Deferred(BaseException):
    """A document's next call has no answer yet. BaseException: it must pass the backend's per-document
    `except Exception` (which would record an error row) and reach the driver, which turns it into a request."""

    def __init__(self, custom_id: str, messages: list[dict]) -> None:
        super().__init__(custom_id)
        self.custom_id, self.messages = custom_id, messages


def base_id(shard_id: int, docid: str) -> str:
    """`<shard>:<docid>`, or a hash of the docid when it is long or could be confused with the separators."""
    if len(docid) <= 40 and docid.isprintable() and "|" not in docid:
        return f"{shard_id}:{docid}"
    return f"{shard_id}:#" + hashlib.blake2b(docid.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def custom_id(base: str, call: int, attempt: int) -> str:
    return f"{base}|{call}|{attempt}"


def _slim(r: BatchResult, constrained: bool = False) -> BatchResult:
    """Only what a Reply needs (and whether its line carried the schema): a 50,000-line pack's results stay a few
    hundred MB at most."""
    if not r.ok or r.body is None:
        return r
    choices = r.body.get("choices") or []
    content = ((choices[0].get("message") or {}).get("content") if choices else None) or ""
    body = {"model": r.body.get("model"), "usage": r.body.get("usage"), "_constrained": constrained}
    return r._replace(body=body | ({"choices": [{"message": {"content": content}}]} if choices else {}))


class Replay:
    """The chat one document sees: call n is answered from the batch results, online, or deferred to a round."""

    def __init__(self, driver: BatchDriver, results: Mapping[str, BatchResult], base: str) -> None:
        self.driver, self.results, self.base, self.calls = driver, results, base, 0

    async def __call__(self, messages: list[dict]) -> Reply:
        d = self.driver
        call, self.calls = self.calls, self.calls + 1
        tries: list[BatchResult] = []
        while (r := self.results.get(custom_id(self.base, call, len(tries)))) is not None:
            tries.append(r)
        for r in tries:
            if r.ok:
                try:
                    reply = reply_from_body(r.body or {}, d.prices, d.cfg.llm.model, batch=True)
                except ValueError:
                    continue  # a 200 without choices: as good as a failed line
                return reply._replace(constrained=bool((r.body or {}).get("_constrained")))
        last = tries[-1] if tries else None
        refused = last is not None and refuses_response_format(last.status_code, last.error_message)
        if refused:  # the provider has no structured outputs: this line goes again without the schema
            d.format_refused(last.describe())  # type: ignore[union-attr]
        if last is not None and not last.ok and not last.retryable and not refused:
            raise LLMError(last.describe(), kind="client", status=last.status_code, attempts=len(tries))
        # A batch that failed as a whole (validation, enqueued-token limit) cost nothing: its lines go into a new
        # batch round whatever the policy, never silently online at twice the price.
        whole_batch_failed = last is not None and last.error_code == "batch_failed"
        if d.cfg.batch.retry == "online" and (last is not None or call > 0) and not whole_batch_failed:
            d.counts["online_calls"] += 1
            return await d.online_chat(messages)
        if last is not None and len(tries) >= d.cfg.batch.max_rounds:
            raise LLMError(f"{last.describe()} (after {len(tries)} batch rounds)", kind="batch", attempts=len(tries))
        raise Deferred(custom_id(self.base, call, len(tries)), messages)


class BatchDriver:
    def __init__(self, cfg: StructureConfig, plan: Any, bar: Any, client: Any) -> None:
        self.cfg, self.plan, self.bar = cfg, plan, bar
        self.out = Path(cfg.out)
        self.store = CheckpointStore(self.out)
        self.prices = PriceTable.load([cfg.llm.prices_file] if cfg.llm.prices_file else [])
        b = cfg.batch
        self.runner = BatchRunner(
            client,
            self.out,
            poll_s=b.poll_s,
            max_requests=b.max_requests,
            max_bytes=b.max_bytes,
            completion_window=b.completion_window,
            metadata={"rise_batch_run": plan.run_hash},
        )
        self.rule = tier_rule(cfg.tier)
        self.heuristic = HeuristicBackend()
        self.by_id = {s.shard_id: s for s in plan.shards}
        self.counts: Counter[str] = Counter()
        self._online = None
        self._online_chat = None
        self.done_at_start: set[int] = set()
        # structured outputs stay off once a provider refused them, also across a resume (the groups record it)
        self.structured = cfg.llm.structured_output and not any(
            self.runner.meta(g).get("structured_output") is False for g in self.runner.groups
        )

    def format_refused(self, why: str) -> None:
        """The provider refused response_format: no later line or online call sends it (warned once)."""
        if self.structured:
            self.structured = False
            self.counts["structured_output_disabled"] = 1
            _say(f"the provider refused structured outputs ({why[:300]}); sending the rest without response_format")
        self.counts["structured_output_refused"] += 1
        if self._online is not None:
            self._online.response_format = None

    def body(self, messages: list[dict]) -> dict[str, Any]:
        """A request line's body: online mode's request, with the TOC schema while structured outputs are on."""
        from rise_batch.llm.client import chat_request  # lazy: loads openai, aiohttp, tenacity (~4 s)

        fmt = {"response_format": TOC_RESPONSE_FORMAT} if self.structured else {}
        return chat_request(self.cfg.llm, messages, **fmt)

    # -- documents ------------------------------------------------------------------------------------------------
    async def online_chat(self, messages: list[dict]) -> Reply:
        if self._online is None:
            from rise_batch.llm.client import client_from_config  # lazy: loads openai, aiohttp, tenacity (~4 s)

            fmt = TOC_RESPONSE_FORMAT if self.structured else None
            self._online = client_from_config(self.cfg.llm, response_format=fmt, out=self.out)
            self._online_chat = self._online.chat
            if self.cfg.max_cost_usd is not None:
                budget = CostBudget(self.cfg.max_cost_usd, checkpoint_cost(self.out) + self._committed())
                model, worst = self.cfg.llm.model, self.cfg.llm.max_output_tokens
                estimate = structuring_estimator(model, self.prices, max_output_tokens=worst)
                self._online_chat = budget.guard(self._online.chat, estimate)
        reply = await self._online_chat(messages)
        if self.structured and self._online.response_format is None:  # the online client found a refusal
            self.format_refused("an online request was refused")
        return reply

    async def replay(self, spec: ShardSpec, doc: Doc, results: Mapping[str, BatchResult]) -> DocResult | Deferred:
        if not goes_to_llm(self.rule, doc):
            return self.heuristic.structure_sync(doc, self.plan.run_hash)[0]
        llm = self.cfg.llm
        backend = LLMBackend(Replay(self, results, base_id(spec.shard_id, doc.docid)), self.plan.prompt_text,
                             reask=llm.reask, max_input_chars=llm.max_input_chars,
                             max_input_tokens=llm.max_input_tokens, counter=counter_for(llm.model))  # fmt: skip
        try:
            return (await backend.structure(doc, self.plan.run_hash))[0]
        except Deferred as d:
            return d

    async def process(self, spec: ShardSpec, results: Mapping[str, BatchResult]) -> list[tuple[str, list[dict]]]:
        """Replay every unfinished document of a shard: rows are checkpointed, the rest become requests (custom_id,
        messages). A shard with nothing left open is materialized and marked done, as the online shard loop ends."""
        if self.store.is_done(spec.shard_id):
            return []
        done = self.store.done_docids(spec.shard_id)
        gate = asyncio.Semaphore(self.cfg.llm.concurrency)

        async def one(doc: Doc) -> DocResult | Deferred:
            async with gate:
                return await self.replay(spec, doc, results)

        docs = [d for d in read_shard(spec, self.cfg.max_doc_chars) if d.docid not in done]
        got = await asyncio.gather(*(one(d) for d in docs), return_exceptions=True)
        rows = [g for g in got if isinstance(g, DocResult)]
        self.store.write_part(spec.shard_id, rows)
        self.bar.update(len(rows))
        for g in got:
            if isinstance(g, BaseException) and not isinstance(g, Deferred):
                raise g  # BudgetExceeded (rows above are kept) or a bug
        requests = [(g.custom_id, g.messages) for g in got if isinstance(g, Deferred)]
        if not requests:
            await finish_shard(self.out, spec, self.cfg.max_doc_chars)
        return requests

    # -- packs ----------------------------------------------------------------------------------------------------
    def packs(self) -> dict[int, list[str]]:
        """pack number -> its group names, round order."""
        out: dict[int, list[str]] = {}
        for name in self.runner.groups:
            out.setdefault(self.runner.meta(name)["pack"], []).append(name)
        return {k: sorted(v, key=lambda g: self.runner.meta(g)["round"]) for k, v in sorted(out.items())}

    def _committed(self) -> float:
        """Estimated dollars of batches submitted and not yet collected."""
        return sum(
            self.runner.meta(g).get("estimate_usd", 0.0) for g in self.runner.groups if not self.runner.is_finished(g)
        )

    def _estimate(self, requests: list[tuple[str, list[dict]]]) -> float:
        return sum(request_cost(m, self.cfg.llm.model, self.prices, batch=True) for _, m in requests)

    async def _submit(self, pack: int, rnd: int, shards: list[int], deferred: list[tuple[str, list[dict]]]) -> None:
        """Submit one round; bodies are built here, so every line of a group carries the same format."""
        estimate = self._estimate(deferred)
        if self.cfg.max_cost_usd is not None:
            spent = checkpoint_cost(self.out) + self._committed()
            if spent + estimate > self.cfg.max_cost_usd:
                raise BudgetExceeded(self.cfg.max_cost_usd, spent, estimate)
        group = f"pack-{pack:05d}.r{rnd}"
        meta = {"pack": pack, "round": rnd, "shards": shards, "requests": len(deferred), "estimate_usd": estimate}
        meta["run_hash"] = self.plan.run_hash
        meta["structured_output"] = self.structured
        requests = [(cid, self.body(messages)) for cid, messages in deferred]
        ids = await self.runner.submit(group, requests, meta)
        self.counts["requests_submitted"] += len(requests)
        _say(f"{group}: {len(requests):,} requests in {len(ids)} batch(es) {', '.join(ids)} (est. ${estimate:,.4f})")

    async def build_pack(self, todo: deque[ShardSpec]) -> int | None:
        """Take whole shards off `todo` until a pack is full; submit it. None when nothing needed the LLM."""
        pack = max(self.packs(), default=-1) + 1
        shards: list[int] = []
        requests: list[tuple[str, list[dict]]] = []
        size = 0
        b = self.cfg.batch
        while todo and len(requests) < b.max_requests and size < b.max_bytes * 0.9:  # ~one input file per pack
            spec = todo.popleft()
            got = await self.process(spec, {})
            if got:
                shards.append(spec.shard_id)
                requests.extend(got)
                size += sum(len(request_line(cid, self.body(messages))) for cid, messages in got)
        if not requests:
            return None
        await self._submit(pack, 0, shards, requests)
        return pack

    async def advance(self, pack: int, groups: list[str]) -> bool:
        """Poll the pack's open round; when it is in, replay its shards. True when the pack is finished."""
        latest = groups[-1]
        if not self.runner.is_finished(latest):
            await self.runner.submit(latest, [])  # a kill between packing and creating: finish the submission
            if not await self.runner.refresh(latest):
                return False
            for f in self.runner.groups[latest]["files"]:
                if f["status"] == "failed":
                    _say(f"batch {f['batch_id']} ({f['name']}) FAILED: {'; '.join(f.get('errors') or ['no reason'])}")
        results: dict[str, BatchResult] = {}
        for g in groups:
            constrained = bool(self.runner.meta(g).get("structured_output"))  # groups of older versions: no schema
            results.update((k, _slim(v, constrained)) for k, v in self.runner.results(g).items())
        shards = self.runner.meta(latest)["shards"]
        requests: list[tuple[str, list[dict]]] = []
        for sid in shards:
            requests.extend(await self.process(self.by_id[sid], results))
        if requests:
            await self._submit(pack, len(groups), shards, requests)
            return False
        return True

    async def run(self) -> None:
        stale = {self.runner.meta(g).get("run_hash") for g in self.runner.groups} - {self.plan.run_hash}
        if stale:  # prepare_run already refused a mismatched run; this is a manifest copied from elsewhere
            raise ConfigError(f"{self.out / MANIFEST} belongs to another run ({', '.join(map(str, stale))})")
        packs = self.packs()
        assigned = {sid for groups in packs.values() for sid in self.runner.meta(groups[0])["shards"]}
        todo = deque(s for s in self.plan.shards if not self.store.is_done(s.shard_id) and s.shard_id not in assigned)
        self.done_at_start = {s.shard_id for s in self.plan.shards if self.store.is_done(s.shard_id)}
        for sid in self.done_at_start:
            self.bar.update(self.store.shard_stats(sid).get("docs_total", 0))
        active = [k for k, groups in packs.items() if not all(self.store.is_done(s) for s in self._shards(groups))]
        stop: BudgetExceeded | None = None
        limit = self.cfg.batch.max_active
        while True:
            while stop is None and todo and (limit is None or len(active) < limit):
                try:
                    pack = await self.build_pack(todo)
                except BudgetExceeded as e:
                    stop = e
                    break
                if pack is not None:
                    active.append(pack)
            progressed = False
            packs = self.packs()
            for k in list(active):
                try:
                    finished = await self.advance(k, packs[k])
                except BudgetExceeded as e:
                    stop, finished = stop or e, False
                    active.remove(k)  # nothing more this run; a resume picks it up
                if finished:
                    active.remove(k)
                    progressed = True
            if not active and (stop is not None or not todo):
                break
            if active and not progressed:
                await asyncio.sleep(self.cfg.batch.poll_s)
        if stop is not None:
            raise stop

    def _shards(self, groups: list[str]) -> list[int]:
        return self.runner.meta(groups[0])["shards"]

    async def aclose(self) -> None:
        if self._online is not None:
            await self._online.aclose()

    def transport(self) -> dict[str, Any]:
        files = [f for g in self.runner.groups.values() for f in g["files"]]
        status = Counter(f["status"] for f in files)
        counts = [f.get("request_counts") or {} for f in files]
        return dict(self.counts) | {
            "batch_groups": len(self.runner.groups),
            "batches": len(files),
            "batch_status": dict(status),
            "batch_lines_completed": sum(c.get("completed", 0) for c in counts),
            "batch_lines_failed": sum(c.get("failed", 0) for c in counts),
        }


def _say(message: str) -> None:
    print(f"rise-batch: {message}", file=sys.stderr, flush=True)


def run_batch(cfg: StructureConfig, plan: Any, bar: Any) -> tuple[list[ShardStats], list[dict]]:
    """Structure every shard of `plan` through the Batch API: (per-shard stats, [batch transport stats])."""

    async def main() -> tuple[list[ShardStats], list[dict]]:
        client = async_client(cfg.llm.base_url, cfg.llm.api_key(), max(cfg.llm.timeout_s, 600.0))
        driver = BatchDriver(cfg, plan, bar, client)
        try:
            await driver.run()
        finally:
            await driver.aclose()
            await client.close()
        markers = [(driver.store.shard_stats(s.shard_id), s.shard_id in driver.done_at_start) for s in plan.shards]
        return [ShardStats.from_marker(m, resumed) for m, resumed in markers], [driver.transport()]

    return asyncio.run(main())


def refuse_if_batches_open(out: str | Path) -> None:
    """Online mode on an OUT whose batch packs are unfinished would pay again for documents already in a batch."""
    path = Path(out) / MANIFEST
    if not path.exists():
        return
    store = CheckpointStore(out)
    groups = read_json(path).get("groups", {})
    open_groups = [name for name, g in groups.items() if not all(store.is_done(s) for s in g["meta"]["shards"])]
    if open_groups:
        raise ConfigError(
            f"{out} has Batch API work not yet collected ({', '.join(sorted(open_groups)[:5])}"
            f"{' ...' if len(open_groups) > 5 else ''}): resume with --mode batch so those documents are not "
            "paid for twice"
        )
