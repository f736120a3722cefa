"""The structure job: scan once, run every shard (in process or on Ray), merge stats, report.

The manifest pins a run: the corpus fingerprint, the shard plan and the run hash. A re-run with the same manifest
resumes (done shards are skipped, partial shards skip their checkpointed docs); a re-run that would produce
different output is refused unless the user asks for a new run, so no document is ever paid for twice by accident.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections import Counter
from pathlib import Path
from typing import NamedTuple

from rise_batch.config import ConfigError, StructureConfig, config_to_dict, run_hash
from rise_batch.corpus.docmap_table import mapped_docmap
from rise_batch.corpus.readers import ShardSpec, list_sources
from rise_batch.corpus.scan import corpus_fingerprint, scan_corpus, shards_from_json, shards_to_json, write_bad_rows
from rise_batch.counters import add_counts
from rise_batch.dirlock import claim, holding
from rise_batch.errors import RunIncomplete, StorageError, with_result
from rise_batch.executor import executor_for
from rise_batch.executor.base import MapOptions, Stage, WorkerSpec
from rise_batch.executor.probe import REMEDY, Input, Output, check_storage, node_labels
from rise_batch.index import build_index
from rise_batch.index.shards import RayShardRunner
from rise_batch.io import dump_json, make_output_dir, read_json, supersede, write_parquet_atomic
from rise_batch.llm.context import MIN_DOCUMENT_TOKENS, document_budget, server_context
from rise_batch.llm.tokens import counter_for
from rise_batch.progress import Progress
from rise_batch.prompts import load_prompt
from rise_batch.storage import ObjectPath, location, redact
from rise_batch.structuring.batch import refuse_if_batches_open, run_batch
from rise_batch.structuring.budget import require_price, spent_so_far
from rise_batch.structuring.checkpoint import CheckpointStore
from rise_batch.structuring.shard import STOPS
from rise_batch.structuring.stats import ShardReport, ShardStats, StructureStats, docs_this_run
from rise_batch.structuring.verify import Verification, missing_structured, repair, verify_checkpoint, verify_outputs
from rise_batch.structuring.worker import ShardProgress, describe_shard, shard_services

MANIFEST = "manifest.json"
OUTPUTS = (
    "checkpoint",
    "stats",
    "corpus",
    "docmap.parquet",
    "bad_rows.parquet",
    "stats.json",
    MANIFEST,
    "index",
    "batches.json",
    "batches",
    "damaged",
)


class RunPlan(NamedTuple):
    shards: list[ShardSpec]
    run_hash: str
    prompt_text: str
    n_docs: int
    n_bad_rows: int


def _plan_key(cfg: StructureConfig, fingerprint: str) -> dict:
    return {
        "fingerprint": fingerprint,
        "limit": cfg.limit,
        "shard_docs": cfg.shard_docs,
        "on_bad_row": cfg.on_bad_row,
        "max_doc_chars": cfg.max_doc_chars,
    }


def prepare_run(cfg: StructureConfig) -> RunPlan:
    """Scan the corpus (or reuse the manifest's scan) and pin the run; refuse a mismatched resume."""
    out = location(cfg.out)
    make_output_dir(out)  # removed again if the run fails before writing into it (errors.run_main)
    claim(out)  # one writer: a second command on this directory is refused until this one ends
    prompt_text = load_prompt(cfg.prompt) if cfg.calls_llm else ""
    rh = run_hash(cfg, prompt_text)
    key = _plan_key(cfg, corpus_fingerprint(list_sources(cfg.corpus)))
    mpath = out / MANIFEST
    if mpath.exists():
        manifest = read_json(mpath)
        same = manifest.get("run_hash") == rh and manifest.get("plan_key") == key
        if same:
            CheckpointStore(out).clean_temporaries()
            return RunPlan(
                shards_from_json(manifest["shards"]),
                rh,
                prompt_text,
                manifest["n_docs"],
                manifest["n_bad_rows"],
            )
        if not cfg.new_run:
            what = "run hash (backend/model/prompt)" if manifest.get("run_hash") != rh else "corpus or shard plan"
            raise ConfigError(
                f"{out} holds a run with a different {what}{_structured_change(manifest, cfg)}: resuming would mix "
                "outputs. "
                "Re-run with the original settings to resume, pass --new-run to start over (the old outputs are "
                "kept under superseded-*/), or choose another --out."
            )
        moved = supersede(out, OUTPUTS)  # --new-run keeps the old outputs (they were paid for)
        print(f"rise-batch: previous run moved to {moved}", file=sys.stderr)
    docids: list[str] = []
    relpaths: list[str] = []
    shard_ids: list[int] = []

    def on_doc(docid: str, rel: str, shard: int) -> None:
        docids.append(docid)
        relpaths.append(rel)
        shard_ids.append(shard)

    with Progress("scan", cfg.limit or 0, "rows", enabled=cfg.progress) as bar:
        plan = scan_corpus(
            cfg.corpus, cfg.shard_docs, cfg.on_bad_row, cfg.limit, cfg.max_doc_chars, on_doc, bar.update, cfg.columns
        )
    import pyarrow as pa

    docmap = pa.table({"docid": docids, "relpath": relpaths, "shard": pa.array(shard_ids, pa.int32())})
    write_parquet_atomic(out / "docmap.parquet", docmap)
    write_bad_rows(plan.bad_rows, out / "bad_rows.parquet")
    CheckpointStore(out).ensure()
    dump_json(
        {
            "run_hash": rh,
            "plan_key": key,
            "corpus": redact(cfg.corpus),
            "config": config_to_dict(cfg),
            "n_docs": plan.n_docs,
            "n_rows": plan.n_rows,
            "n_bad_rows": len(plan.bad_rows),
            "shards": shards_to_json(plan.shards),
            "files": {"docmap.parquet": (out / "docmap.parquet").stat().st_size},  # its readers' bound
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
        mpath,
    )
    return RunPlan(plan.shards, rh, prompt_text, plan.n_docs, len(plan.bad_rows))


def _structured_change(manifest: dict, cfg: StructureConfig) -> str:
    """Why the hash changed when structured outputs did: a manifest from before the setting was made without them
    (the setting is on by default now), so the remedy to resume it is --no-structured-output."""
    old = manifest.get("config") or {}
    if old.get("backend") != "llm" or not cfg.calls_llm:
        return ""
    before = bool((old.get("llm") or {}).get("structured_output", False))
    if before == cfg.llm.structured_output:
        return ""
    if before:
        return " (it was made with structured outputs: drop --no-structured-output to resume it)"
    return " (it was made without structured outputs: add --no-structured-output to resume it)"


MAX_SHARD_ATTEMPTS = 3  # worker deaths under one shard before it is an application bug and the job fails loudly


def lent_env(cfg: StructureConfig) -> tuple[str, ...]:
    """The variables the job lends its actors when attached to a cluster (beside executor.ray.FORWARDED_ENV): the
    API key's. Every connection of the job asks for them, since the first one decides."""
    return (cfg.llm.api_key_env,) if cfg.calls_llm else ()


def run_shards(
    cfg: StructureConfig, plan: RunPlan, bar, nodes: dict[int, str] | None = None
) -> tuple[dict[int, ShardStats], list[dict]]:
    """Every shard of `plan` through the executor `cfg` asks for: (stats by shard id, per-worker transport stats);
    on Ray, `nodes` gets the id of the node that ran each shard.

    `--workers 0` runs the shards in this process, two at once for the LLM backend, one after another for the
    heuristic; otherwise `workers` Ray actors each run a share of `max_shards_in_flight` shards at once. Either way
    the bar counts documents as they finish (worker.ShardProgress).
    A --max-cost stop, or a key the endpoint refuses, lets the running shards finish with their rows flushed, then
    raises BudgetExceeded or KeyRefused.
    """
    results: dict[int, ShardStats] = {}
    local = cfg.n_workers == 0

    def on_node(spec: ShardSpec, node: str) -> None:
        if nodes is not None:
            nodes[spec.shard_id] = node

    shown = ShardProgress(bar, local)

    def on_result(spec: ShardSpec, report: ShardReport) -> None:
        results[spec.shard_id] = report.stats
        shown.on_result(spec, report)

    n = max(cfg.n_workers, 1)
    if local:  # LLM: two shards at once, so one's requests go out while the other drains and writes its files (the
        # client still holds the worker to llm.concurrency requests in flight); one lane stalled at each boundary
        per_worker = 2 if cfg.calls_llm else 1
    else:
        per_worker = max(1, (cfg.max_shards_in_flight or 2 * n) // n)
    options = MapOptions(
        max_in_flight=n * per_worker,
        per_worker=per_worker,
        max_attempts=MAX_SHARD_ATTEMPTS,
        wait_ready=False,
        worker_memory=int(cfg.worker_memory_gb * 2**30),
    )
    config = {"cfg": cfg, "prompt_text": plan.prompt_text, "run_hash": plan.run_hash}
    stage = Stage(
        worker=WorkerSpec("rise_batch.structuring.worker:ShardWorker", config, name="StructureWorker"),
        what="structure",
        describe=describe_shard,
        on_result=on_result,
        on_node=on_node,
        on_progress=shown.on_progress,
        services=shard_services(cfg, plan.run_hash, shown.on_doc),
        stop_on=STOPS,
    )
    transport = executor_for(cfg.n_workers, options, cfg.ray_address, lent_env(cfg)).map(stage, plan.shards)
    return results, transport


def fit_to_server(cfg: StructureConfig, prompt_text: str) -> StructureConfig:
    """The config whose documents fit the context the server says it has (llm/context.py): a smaller
    `max_input_tokens` when the server's is the tighter bound (the run hash is already pinned: a cut is recorded per
    row, as --max-input-tokens's is). A context with no room for a document is refused before anything is paid."""
    said = server_context(cfg.llm)
    if said is None:
        return cfg
    n_ctx, url = said
    budget = document_budget(n_ctx, cfg.llm.max_output_tokens, counter_for(cfg.llm.model).count(prompt_text))
    if budget < MIN_DOCUMENT_TOKENS:
        raise ConfigError(
            f"{url} says its context holds {n_ctx} tokens per request, which leaves {max(budget, 0)} for a document "
            f"beside the prompt and --max-output-tokens {cfg.llm.max_output_tokens}: lower --max-output-tokens, or "
            "start the server with a larger context per slot (llama.cpp: a larger --ctx-size or fewer --parallel)"
        )
    if cfg.llm.max_input_tokens is not None and cfg.llm.max_input_tokens <= budget:
        return cfg
    print(
        f"rise-batch: {url} says its context holds {n_ctx} tokens per request: documents longer than {budget} tokens "
        "are cut to fit (recorded per row as input-truncated)",
        file=sys.stderr,
        flush=True,
    )
    return dataclasses.replace(cfg, llm=dataclasses.replace(cfg.llm, max_input_tokens=budget))


def check_checkpoint(cfg: StructureConfig, plan: RunPlan, full: bool) -> dict:
    """Verify the checkpoint before resuming it (structuring/verify.py); damaged files are moved aside, named on
    stderr, and their documents redone. Returns the stats.json keys saying what that re-buys ({} when nothing)."""
    found = verify_checkpoint(cfg.out, plan.shards, full)
    found = found._replace(damaged=found.damaged + missing_structured(cfg.out, plan.shards))
    repair(cfg.out, found, lambda line: print(f"rise-batch: {line}", file=sys.stderr, flush=True))
    return found.stats()


@holding("rise-batch structure")
def run_structure(cfg: StructureConfig, verify: bool = False) -> dict:
    """The whole job; returns the merged stats that are also written to OUT/stats.json. `verify` is `--verify`:
    every checkpoint part's digest and rows are checked, not only its footer."""
    t0 = time.monotonic()
    require_price(cfg)  # a --max-cost over an unpriced model could never stop the run: refuse before the scan
    if cfg.n_workers > 0:  # workers on other nodes must write the OUT this driver reads, and read the same corpus
        corpus = [Input("the corpus (--corpus)", cfg.corpus, "corpus")]
        check_storage(cfg.ray_address, [Output("OUT", cfg.out)], corpus, env=lent_env(cfg))
    plan = prepare_run(cfg)
    rebought = check_checkpoint(cfg, plan, verify)
    if cfg.mode == "online":
        refuse_if_batches_open(cfg.out)
    llm = cfg.calls_llm  # dollars exist only there; retries and 429s are counted online, per shard
    online = llm and cfg.mode == "online"
    nodes: dict[int, str] = {}  # shard id -> the Ray node that ran it
    with Progress(
        f"structure[{cfg.backend}]", plan.n_docs, enabled=cfg.progress, show_cost=llm, show_transport=online
    ) as bar:
        if cfg.mode == "batch":  # one driver process: the provider does the parallel work
            shard_stats, transport = run_batch(cfg, plan, bar)
        else:
            sent = fit_to_server(cfg, plan.prompt_text) if online else cfg  # what the server's context holds
            by_shard, transport = run_shards(sent, plan, bar, nodes)
            transport += verify_shards(sent, plan, bar, nodes, by_shard)
            shard_stats = list(by_shard.values())
    shards = sum(shard_stats, ShardStats())
    stats = StructureStats(shards, len(plan.shards), plan.run_hash, cfg.backend, plan.n_bad_rows,
                           docs_this_run(shard_stats), time.monotonic() - t0, checked=rebought)  # fmt: skip
    if nodes:  # on Ray: how many shards each node ran
        labels = node_labels()
        stats.nodes = dict(sorted(Counter(labels.get(n, n) for n in nodes.values()).items()))
    if cfg.calls_llm:
        stats.transport = add_counts(transport)  # this run's HTTP traffic (not that of killed earlier runs)
        stats.structured_output, stats.structured_output_switched_off = structured_output_state(cfg, stats.transport)
    if shards.docs_left:
        dump_json(with_spent(stats, cfg), location(cfg.out) / "stats.json")
        raise with_result(RunIncomplete(left_message(shards)), with_spent(stats, cfg))
    if not isinstance(location(cfg.out), ObjectPath):  # the docs dir's table, so that no run's actor derives it
        mapped_docmap(cfg.out)
    if cfg.index:
        stats.index = build_job_index(cfg, plan)
    out = with_spent(stats, cfg)
    dump_json(out, location(cfg.out) / "stats.json")
    return out


def with_spent(stats: StructureStats, cfg: StructureConfig) -> dict:
    """stats.json's figures and `spent_usd`: all OUT has paid, every resume (its spend journal, money/spent.py)."""
    return stats.to_json() | {"spent_usd": round(spent_so_far(cfg.out), 6)}


def verify_shards(
    cfg: StructureConfig, plan: RunPlan, bar, nodes: dict[int, str], by_shard: dict[int, ShardStats]
) -> list[dict]:
    """The driver's check of what the workers reported, on its own view of OUT (structuring/verify.py): a shard
    whose marker, parts or structured files it does not find as recorded is repaired and run once more (its rows
    are checkpointed: nothing is re-bought unless a part is gone); still missing after that, the job fails naming
    the file and the node that wrote it. Returns the second pass's transport stats."""

    def say(line: str) -> None:
        print(f"rise-batch: {line}", file=sys.stderr, flush=True)

    def fresh() -> set[int]:
        return {sid for sid, stats in by_shard.items() if not stats.shards_resumed}

    def reported_done() -> list[ShardSpec]:  # a shard that left documents undone has no marker on purpose
        return [s for s in plan.shards if s.shard_id not in by_shard or not by_shard[s.shard_id].docs_left]

    bad = verify_outputs(cfg.out, reported_done(), fresh())
    if not bad:
        return []
    repair(cfg.out, Verification(bad, {}, {}), say)
    again = {d.shard_id for d in bad}
    redo, transport = run_shards(cfg, plan._replace(shards=[s for s in plan.shards if s.shard_id in again]), bar, nodes)
    by_shard.update(redo)
    bad = verify_outputs(cfg.out, reported_done(), fresh())
    if bad:
        d = bad[0]
        node = nodes.get(d.shard_id)
        if node is not None:
            node = node_labels().get(node, node)
        where = f"written by node {node}" if node else "written in this process"
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise StorageError(
            f"{d.path}: {d.reason}{more}, {where}, still after the shard ran again: the workers do not write the "
            f"OUT this driver reads; {REMEDY}"
        )
    return transport


def left_message(stats: ShardStats) -> str:
    """Why the run exits before its end: documents whose requests failed for a transient reason were left undone."""
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(stats.left_kinds.items()))
    return (
        f"{stats.docs_left} documents were left undone: their requests failed for a transient reason after every "
        f"attempt ({kinds}; e.g. {stats.left_example}). Nothing was recorded for them; the {stats.docs_total} "
        "documents finished are kept. Re-run the same command to do the rest."
    )


def build_job_index(cfg: StructureConfig, plan: RunPlan) -> str:
    """BM25 over the ORIGINAL text of exactly the documents of this run (same shard plan, same refused rows).

    A finished index for the same number of documents is kept, so a resumed job does not rebuild it.
    """
    out = location(cfg.out) / "index"
    meta = out / "meta.json"
    if meta.exists() and read_json(meta).get("counts", {}).get("n_docs") == plan.n_docs:
        return str(out)
    runner = None
    if cfg.n_workers > 0:
        # a POSIX OUT is shared by every worker: postings spill there; from object storage they come through Ray
        runner = RayShardRunner(cfg.ray_address, spill=not isinstance(out, ObjectPath))
    build_index(
        cfg.corpus,
        out,
        workers=max(cfg.n_workers, 1),
        shards=plan.shards,
        on_bad_row=cfg.on_bad_row,
        runner=runner,
        overwrite=True,
        progress=cfg.progress,
    )
    return str(out)


def structured_output_state(cfg: StructureConfig, transport: dict) -> tuple[str, int]:
    """Whether this run sent the TOC schema: "on", "off" (--no-structured-output) or "refused" (the server refused
    it and the run went on without), and how many workers switched it off."""
    switched = int(transport.get("structured_output_disabled", 0))
    return "off" if not cfg.llm.structured_output else "refused" if switched else "on", switched


def summary_line(stats: dict, out: str) -> str:
    """One quiet, grep-able line for logs and scripts."""
    keys = (
        "docs_total",
        "docs_with_toc",
        "bad_rows",
        "anchors_proposed",
        "anchors_located",
        "llm_calls",
        "input_tokens",
        "output_tokens",
        "cost_usd",
        "wall_seconds",
        "docs_per_second",
    )
    if stats.get("structured_output") == "refused":  # only when the provider refused the schema
        out += " structured_output=refused"
    tail = f" index={stats['index']}" if stats.get("index") else ""  # --index: the index is part of the result
    if "rebought_replies" in stats:  # only after a kill or damage: an undamaged run's line is unchanged
        keys += ("rebought_replies",)
        damaged = len(stats.get("damaged_files", []))
        tail = f" damaged_files={damaged}" + tail
    return "structure " + " ".join(f"{k}={stats.get(k, 0)}" for k in keys) + f"{tail} out={out}"


def next_commands(stats: dict, out: str) -> list[str]:
    """What to try once `structure --index` is done: search the new index into a workspace, then run agents over
    it. Paths are the run's own, quoted for a shell; without an index there is nothing to search yet."""
    import shlex

    if not stats.get("index"):
        return []
    index, docs = shlex.quote(str(stats["index"])), shlex.quote(str(out))
    parent = location(out).parent  # beside OUT: a new run of OUT never moves them
    ws = shlex.quote(str(parent / "workspace" if isinstance(parent, Path) else Path("workspace")))  # a POSIX dir
    runs = shlex.quote(str(parent / "rise-run"))
    return [
        f'next: rise-batch workspace search --index {index} --docs {docs} --workspace {ws} "your question"',
        f"then: rise-batch run --queries QUERIES.jsonl --index {index} --docs {docs} --out {runs}",
    ]
