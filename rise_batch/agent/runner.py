"""One query end to end: a fresh workspace, the agent loop, the trajectory file, the workspace removed.

The same `run_query` runs in the CLI process (workers=0) and inside Ray actors; a `WorkerContext` holds what a
worker builds once and shares among the trajectories it runs at the same time (LLM client, document store, BM25
index, a thread pool for blocking tool calls). A trajectory always ends in a file: on its own stop reason, at the
worker-side deadline (budget + a few seconds, should the loop itself ever fail to stop), or when the driver's
watchdog cancels it (recorded as `wall_clock` with whatever it had done).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson

from rise_batch.agent.inputs import localize
from rise_batch.agent.ledger import EARLIER, earlier_spend
from rise_batch.agent.loop import AgentRun, run_agent
from rise_batch.agent.run_config import RunConfig
from rise_batch.agent.run_tables import derive_ahead
from rise_batch.agent.systems import get_system, open_tools, workspace_docs
from rise_batch.agent.views import VIEWS, docs_for, view_built
from rise_batch.agent.workspace_root import claim_workspace_root
from rise_batch.cache import same_filesystem
from rise_batch.executor.local import node_cpus
from rise_batch.index.retriever import open_retriever, parse_retriever
from rise_batch.io import read_json, write_json_atomic
from rise_batch.llm.errors import KeyRefused
from rise_batch.money.journal import spend_what
from rise_batch.names import safe_stem as safe_name  # a query id's file stem
from rise_batch.prompts import load_prompt
from rise_batch.queries import Query
from rise_batch.space.docstore import DocStore
from rise_batch.space.sandbox import SandboxLimits
from rise_batch.space.tools import ToolSet
from rise_batch.storage import AnyPath, ObjectPath, location, staging_path

log = logging.getLogger(__name__)
WORKER_SLACK_S = 5.0  # the worker-side deadline: budget + this, in case the loop's own checks are stuck
TRAJECTORIES, EVENTS = "trajectories", "events.jsonl"
EVENT_PARTS = "events"  # in object storage: one object of events per process that logged (see EventLog)


def trajectory_path(run_dir: str | AnyPath, query_id: str) -> AnyPath:
    """RUN_DIR/trajectories/<query>.json, on a POSIX path or in object storage (written once, whole)."""
    return location(run_dir) / TRAJECTORIES / f"{safe_name(query_id)}.json"


def finished(run_dir: str | AnyPath, query_id: str, config_hash: str, retryable_too: bool = False) -> bool:
    """Does this query already have a trajectory written under this config hash (and not one a transient failure
    ended, which a resume runs again, unless `retryable_too`: the driver's check that a file was written at all)?"""
    path = trajectory_path(run_dir, query_id)
    try:
        record = read_json(path)
        return record.get("config_hash") == config_hash and (retryable_too or not record.get("retryable"))
    except (OSError, ValueError, AttributeError):
        return False


class EventLog:
    """RUN_DIR/events.jsonl: one JSON line per event, appended with a single write (safe across processes).

    Object storage cannot be appended to, and the driver and each worker (on any node) log: there each process
    keeps its lines in a local file and puts them whole, when it closes its log, as its own object
    RUN_DIR/events/<host>-<pid>-<id>.jsonl (EVENT_PARTS), so no writer replaces another's lines. A killed process's
    lines are lost there, never a trajectory."""

    def __init__(self, path: AnyPath) -> None:
        self.remote: ObjectPath | None = None
        if isinstance(path, ObjectPath):
            import socket
            import uuid

            name = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl"
            self.remote = path.parent / EVENT_PARTS / name
            path = staging_path(self.remote)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.local = path
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, event: dict[str, Any]) -> None:
        os.write(self.fd, orjson.dumps({"t": round(time.time(), 4), **event}) + b"\n")

    def close(self) -> None:
        os.close(self.fd)
        if self.remote is not None:
            self.remote.upload(self.local)
            self.local.unlink(missing_ok=True)


def system_docs(cfg: RunConfig, view: str | None = None) -> str:
    """The docs a worker's system reads (its view, agent/views.py; or the named `view`). A view derived from DOCS
    (the original text, TOC-only files; not given as the user's own copy) is derived on this worker's node if need
    be: the driver's is on the driver's node, and a node with its own copy of DOCS has none until one of its workers
    builds it (once per node, agent/view_files.py)."""
    entry = VIEWS.lookup(view) if view else get_system(cfg.system).view
    return docs_for(entry, cfg, workers=node_cpus())  # every core of the node: it waits for this


class WorkerContext:
    """What one worker builds once for all of its trajectories. Docs and index in object storage are this node's
    cached copies (agent/inputs.py): `cache` says what getting them cost this worker, `first_trajectory_s` how
    long after it started its first trajectory began (both reported by QueryWorker.close)."""

    def __init__(
        self, cfg: RunConfig, config_hash: str, limiter: Any = None, node: str | None = None, budget: Any = None
    ) -> None:
        from rise_batch.llm.client import client_from_config  # lazy: loads openai, aiohttp, tenacity (~4 s)

        self.started = time.monotonic()
        self.first_trajectory_s: float | None = None
        self.node = node  # the Ray node id (None in the driver's process)
        self.config_hash = config_hash
        self.system = get_system(cfg.system)
        self.prompt_text = load_prompt(self.system.prompt)
        self.budget = cfg.budget()
        self.run_dir = location(cfg.out)
        ws_dir = cfg.workspace_dir  # of the locations given: beside this node's cache when the docs are cached
        inputs_t0 = time.monotonic()
        self.cfg, self.cache = localize(cfg, self.system.uses_index)
        cfg = self.cfg
        view = self.system.view
        t0, had_view = time.monotonic(), view_built(view, cfg.docs)
        docs = system_docs(cfg)
        if self.cache:  # this node's copies: their missing tables derived in a process that ends, not in this actor
            derive_ahead([cfg.docs, docs], cfg.index if self.system.uses_index else None)
        if "docs" in self.cache and docs != cfg.docs:  # a view derived in this node's cached docs (the original twin)
            self.cache[view.name] = {"bytes": 0, "seconds": round(time.monotonic() - t0, 3), "reused": had_view}
        # the wall of getting them all: the index is copied while the docs tree is made (localize)
        self.inputs_s = round(time.monotonic() - inputs_t0, 3) if self.cache else None
        self.store = DocStore(docs)
        # the files the view's entries point at (RISE-TOC: the structured files), which its `read` opens
        self.lines = DocStore(system_docs(cfg, view.lines_of)) if view.lines_of else None
        self.cost_budget = budget  # --max-cost: what every model call reserves from (llm/cost_cap.worker_budget)
        # api: a wrapper; out: every call is written in the run directory's spend journal (money/journal.py)
        self.client = client_from_config(cfg.llm, limiter=limiter, api=cfg.api, budget=budget, out=self.run_dir)
        self.params: dict[str, Any] = {}
        if cfg.api == "responses":
            self.params["prompt_cache_key"] = f"rise-batch:{self.system.name}:{config_hash}"
        self.limits = SandboxLimits(
            timeout_s=cfg.bash_timeout_s, max_output_chars=cfg.bash_max_output_chars, nice=cfg.bash_nice
        )
        self.executor = ThreadPoolExecutor(max_workers=2 * cfg.concurrency + 4, thread_name_prefix="tool")
        self.events = EventLog(self.run_dir / EVENTS)
        # claimed by the driver already; made here too where it is not (a worker on another node's file system)
        self.ws_root = claim_workspace_root(ws_dir, cfg.out, default=cfg.workspace_root is None, driver=False)
        if self.cache:
            self._cache_event(docs)
        self._index: Any = None
        self._index_lock = threading.Lock()
        self._closing: set[Future] = set()  # finished trajectories' tool sets being closed (close_soon)

    def _cache_event(self, docs: str) -> None:
        """One `cache` event per worker: what its node's copies cost it; a warning when its workspaces cannot
        hardlink the cached docs (another file system: every document is then copied into each workspace)."""
        linked = same_filesystem(Path(docs), self.ws_root)
        if not linked:
            log.warning(
                "workspace root %s is on another file system than the cached docs %s: documents are copied into "
                "each workspace, not hardlinked; leave --workspace-root unset (it then lives beside the cache) or "
                "put it on the file system of --cache-dir",
                self.ws_root,
                docs,
            )
        self.events.write({"event": "cache", "node": self.node, "pid": os.getpid(), "inputs": self.cache,
                           "hardlinks": linked})  # fmt: skip

    def report(self) -> dict[str, Any]:
        """What this worker's node copies cost it, for the run's stats (stats["cache"], per node)."""
        return {
            "node": self.node,
            "inputs": self.cache,
            "inputs_s": self.inputs_s,
            "first_trajectory_s": self.first_trajectory_s,
        }

    def index(self) -> Any:
        """The retriever (bm25, dense or hybrid), loaded on first use (from a tool thread; DCI never loads it)."""
        with self._index_lock:
            if self._index is None:
                self._index = open_retriever(
                    self.cfg.index, self.cfg.retriever, embedder=self.cfg.embedder, backend=self.cfg.index_backend
                )
        return self._index

    def close_soon(self, tools: ToolSet) -> None:
        """End a finished trajectory's tools (its sandbox: bwrap's exit is waited for, seconds on a busy node) in a
        tool thread, so that neither the event loop nor the trajectory's slot waits; `aclose` waits for them."""
        try:
            future = self.executor.submit(_close_tools, tools)
        except RuntimeError:  # the executor is shut down: the worker is closing
            _close_tools(tools)
            return
        self._closing.add(future)
        future.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        if self._closing:
            await asyncio.wait([asyncio.wrap_future(f) for f in list(self._closing)])
        await self.client.aclose()
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.events.close()


def _close_tools(tools: ToolSet) -> None:
    try:
        tools.close()
    except Exception:  # the trajectory is written already; its sandbox then ends at its idle exit
        log.exception("closing a trajectory's tools failed")


def trajectory_record(
    ctx: WorkerContext, query: Query, run: AgentRun, ws_docs: int, earlier: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The trajectory file; `earlier`: what cut runs of this query paid before (agent/ledger.py)."""
    return (
        {
            "query_id": query.query_id,
            "query": query.query,
            "system": ctx.system.name,
            "model": ctx.cfg.llm.model,
            # what bounded the interaction space (bm25, dense or the hybrid fusion in full); a system without search
            # (DCI) has none
            **({"retriever": str(parse_retriever(ctx.cfg.retriever))} if ctx.system.uses_index else {}),
            "config_hash": ctx.config_hash,
            "final_text": run.final_text,
            "exact_answer": run.exact_answer,
            "confidence": run.confidence,
            "stop_reason": run.stop_reason,
            "model_calls": run.model_calls,
            "tool_calls": dict(run.tool_calls),
            "usage": run.usage(),
            "cost_usd": round(run.cost_usd, 8),
            "replayed_usd": round(run.replayed_usd, 8),  # of cost_usd: kept replies an earlier run paid for
            "cancelled_calls": run.cancelled_calls,  # not in usage nor cost_usd: then those are a lower bound
            "elapsed_s": round(run.elapsed_s, 3),
            "workspace_docs": ws_docs,
            "retrieved_docids": list(run.retrieved),
            "surfaced_docids": list(run.surfaced),
            "gold_doc_ids": list(query.gold_doc_ids),
            # where the gold documents are, so a report can tell a `sed -n 1,40p <path>` of one from other reads
            "gold_paths": gold_paths(ctx.store, query.gold_doc_ids),
            "answer": query.answer,
            "steps": run.steps,
            "calls": run.calls,  # the model's text of each reply; `tool_calls` of them say which steps each one made
            "error": run.error,
            "timing": {"model_s": round(run.model_s, 3), "tool_s": round(run.tool_s, 3)},
        }
        | ({"retryable": True} if run.retryable else {})
        | ({EARLIER: earlier} if earlier else {})
    )


def gold_paths(store: DocStore, gold: Sequence[str]) -> dict[str, str]:
    """Gold docid -> its path in the docs (as the agent's tools show it), so a report can tell a bash read of a
    gold document (`sed -n 1,40p <path>`) from other reads; gold missing from the docs is left out."""
    return {d: rel for d in gold if (rel := store.relpath.get(d)) is not None}


def summary_of(record: dict[str, Any]) -> dict[str, Any]:
    """The few numbers a driver's progress line needs."""
    keys = (
        "query_id",
        "stop_reason",
        "model_calls",
        "cost_usd",
        "replayed_usd",
        "elapsed_s",
        "error",
        "usage",
        "timing",
    )
    return {k: record.get(k) for k in keys} | {"tool_calls": sum((record.get("tool_calls") or {}).values())}


async def run_query(ctx: WorkerContext, query: Query, attempt: int = 1) -> dict[str, Any]:
    """Run one query to its end and write its trajectory file; returns the summary."""
    tripped = getattr(ctx.cost_budget, "tripped", None)
    if tripped is not None:  # --max-cost refused a call already: no new trajectory starts
        raise tripped
    if ctx.first_trajectory_s is None:
        ctx.first_trajectory_s = round(time.monotonic() - ctx.started, 3)
    earlier = earlier_spend(trajectory_path(ctx.run_dir, query.query_id))
    name = safe_name(query.query_id)
    spend_what.set(f"trajectory:{name}")  # the journal's entries of this trajectory's calls (money/spent.py)
    ws_path = ctx.ws_root / name
    if ws_path.exists():  # left by a worker that died running this query
        shutil.rmtree(ws_path, ignore_errors=True)
    run = AgentRun()
    ws = None
    emit = _emitter(ctx, query.query_id, attempt)
    emit({"event": "start", "system": ctx.system.name})
    tools: ToolSet | None = None
    try:
        try:
            tools, ws = await asyncio.get_running_loop().run_in_executor(
                ctx.executor,
                lambda: open_tools(
                    ctx.system,
                    ctx.store,
                    ctx.index,
                    ws_path,
                    k=ctx.cfg.k,
                    limits=ctx.limits,
                    allow_unsandboxed=ctx.cfg.allow_unsandboxed,
                    keep_workspace=ctx.cfg.keep_workspaces,
                    lines=ctx.lines,
                ),
            )
            agent = run_agent(
                ctx.client,
                ctx.prompt_text,
                query.query,
                tools,
                ctx.budget,
                run=run,
                context=ctx.system.context,
                params=ctx.params,
                executor=ctx.executor,
                on_event=emit,
            )
            await asyncio.wait_for(agent, ctx.budget.wall_clock_s + WORKER_SLACK_S)
        except TimeoutError:
            run.end("wall_clock", "stopped by the worker-side deadline")
        except asyncio.CancelledError:
            run.end("wall_clock", "cancelled by the driver's watchdog after the wall-clock budget")
            _finish(ctx, query, run, ws, emit, earlier)
            raise
        except KeyRefused:  # the job stops; the query has no outcome (no file), so a resume runs it
            emit({"event": "key_refused"})
            if ws is not None:
                ws.close()
            raise
        except Exception as e:  # a harness failure must not take the worker's other trajectories down
            run.end("api_error", f"harness error: {type(e).__name__}: {e}")
        if run.budget_stop is not None:  # --max-cost: the job starts no new trajectory (the executor's stop_on)
            emit({"event": "budget_stop", "model_calls": run.model_calls})
            if run.model_calls == 0:  # refused before its first call: it never started, so it leaves no file
                if ws is not None:
                    ws.close()
                raise run.budget_stop
            _finish(ctx, query, run, ws, emit, earlier)
            raise run.budget_stop
        return _finish(ctx, query, run, ws, emit, earlier)
    finally:
        if tools is not None:  # in a tool thread, not awaited: its bwrap may take seconds to exit
            ctx.close_soon(tools)


def transient_runs(ctx: WorkerContext, query: Query, run: AgentRun) -> dict[str, Any]:
    """The record's count of runs in a row a transient failure ended this query ({} when this one did not). At
    `llm.max_transient_runs` the query is given up on: no longer retryable, its error naming each run's failure, so
    a run whose endpoint fails one query for good can end. A stop at the cost cap (`budget`) is no failure."""
    if not run.retryable or run.budget_stop is not None:
        return {}
    try:
        before = read_json(trajectory_path(ctx.run_dir, query.query_id))
    except (OSError, ValueError):
        before = {}
    same = isinstance(before, dict) and before.get("config_hash") == ctx.config_hash and before.get("retryable")
    runs = int(before.get("transient_runs") or 1) + 1 if same else 1
    errors = [*(before.get("transient_errors") or [] if same else []), (run.error or "")[:200]][-runs:]
    if runs >= ctx.cfg.llm.max_transient_runs:
        run.retryable = False
        said = "; ".join(f"run {i + 1}: {e}" for i, e in enumerate(errors))
        run.error = f"failed for a transient reason in {runs} runs in a row, given up ({said})"
    return {"transient_runs": runs, "transient_errors": errors}


def _finish(ctx: WorkerContext, query: Query, run: AgentRun, ws, emit, earlier=None) -> dict[str, Any]:
    repeated = transient_runs(ctx, query, run)
    record = trajectory_record(ctx, query, run, workspace_docs(ctx.system, ctx.store, ws, run), earlier) | repeated
    if ws is not None:
        ws.close()
    write_json_atomic(trajectory_path(ctx.run_dir, query.query_id), record)
    summary = summary_of(record)
    emit({"event": "end", **{k: v for k, v in summary.items() if k != "query_id"}})
    return summary


def _emitter(ctx: WorkerContext, query_id: str, attempt: int):
    pid = os.getpid()

    def emit(event: dict[str, Any]) -> None:
        ctx.events.write({"query_id": query_id, "attempt": attempt, "pid": pid, **event})

    return emit


def failed_record(
    cfg_hash: str, cfg: RunConfig, query: Query, reason: str, error: str, elapsed: float, retryable: bool = False
) -> dict:
    """A trajectory file the driver writes itself, for a query whose worker never reported back (`retryable`: for
    a reason not the query's own, such as its workers' node lost, so that a resume runs it again). What cut runs of
    the query paid before stays recorded (agent/ledger.py)."""
    earlier = earlier_spend(trajectory_path(cfg.out, query.query_id))
    return (
        {
            "query_id": query.query_id,
            "query": query.query,
            "system": cfg.system,
            "model": cfg.llm.model,
            "config_hash": cfg_hash,
            "final_text": "",
            "exact_answer": None,
            "confidence": None,
            "stop_reason": reason,
            "model_calls": 0,
            "tool_calls": {},
            "usage": {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0},
            "cost_usd": 0.0,
            "elapsed_s": round(elapsed, 3),
            "workspace_docs": 0,
            "retrieved_docids": [],
            "surfaced_docids": [],
            "gold_doc_ids": list(query.gold_doc_ids),
            "gold_paths": {},
            "answer": query.answer,
            "steps": [],
            "calls": [],
            "error": error,
        }
        | ({"retryable": True} if retryable else {})
        | ({EARLIER: earlier} if earlier else {})
    )
