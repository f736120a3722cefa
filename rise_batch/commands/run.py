"""`rise-batch run`: agent trajectories for a query file, one JSON per query in RUN_DIR (resumable)."""

from __future__ import annotations

import argparse
import json

from rise_batch.commands.structure import add_model_flags, add_rate_flags


def add_run_flags(p: argparse.ArgumentParser) -> None:
    """Flags shared by `run` and jobs/run_trajectories.py; None means 'take the config file's value'."""
    p.add_argument("--config", help="YAML config (keys of RunConfig, optionally under `run:`; flags override it)")
    p.add_argument(
        "--queries", help="query file (JSONL[.gz], TSV, .json list) with query_id, query, optionally answer and gold"
    )
    p.add_argument(
        "--system", help="agent system, a name in rise_batch/agent/systems.py (default rise; also rise-bm25, ...)"
    )
    p.add_argument("--index", help="BM25 index directory (from `rise-batch index` or `structure --index`)")
    p.add_argument("--docs", help="structured docs dir (a `structure` output: corpus/<relpath> + docmap.parquet)")
    p.add_argument(
        "--original-docs",
        help="docs dir with the original text, for systems that read original files (default: derived once into "
        "DOCS/original/ by removing the TOCs)",
    )
    p.add_argument("--out", help="run directory (created; re-running the same command resumes)")
    p.add_argument("--k", type=int, help="documents linked into the workspace per sub-query (default 1000)")
    p.add_argument("--max-calls", type=int, help="model calls per query (default: the system's; 100, dci 300)")
    p.add_argument("--wall-clock-s", type=float, help="seconds per query (default: the system's; 3600, dci 5400)")
    p.add_argument("--limit", type=int, help="run only the first N queries")
    p.add_argument(
        "--gold",
        choices=["gold", "evidence"],
        help="gold_R's gold: the query file's gold_docs/gold_doc_ids (default) or evidence_docs/evidence_doc_ids",
    )
    p.add_argument("--qrels", help="TREC qrels file (`qid iter docid rel`) whose relevant docs are gold_R's gold")
    p.add_argument("--workers", type=int, help="Ray actors (default 2); 0 runs everything in this process")
    p.add_argument("--concurrency", type=int, help="trajectories in flight across all workers (default 8)")
    p.add_argument("--ray-address", help="connect to this Ray cluster (default: start a local Ray)")
    p.add_argument("--workspace-root", help="where per-query workspaces live (default RUN_DIR/workspaces)")
    p.add_argument(
        "--cache-dir",
        help="where each node keeps its copies of --docs/--index in object storage, made once per node and reused "
        "(default $RISE_BATCH_CACHE, else <node's temp dir>/rise-batch-cache)",
    )
    p.add_argument("--keep-workspaces", action="store_true", default=None, help="keep workspaces after each query")
    p.add_argument("--index-backend", choices=["auto", "numpy", "numba"], help="BM25 scorer (default auto)")
    p.add_argument("--retriever", help="bm25 (default), dense, hybrid[:rrf[:K]] or hybrid:weighted[:W]")
    p.add_argument("--embedder", help="dense/hybrid: must match the index's model (default: the recorded one)")
    p.add_argument(
        "--unsandboxed",
        dest="allow_unsandboxed",
        action="store_true",
        default=None,
        help="DANGEROUS: run bash without bubblewrap if it is unavailable (commands can modify the corpus)",
    )
    p.add_argument(
        "--new-run",
        action="store_true",
        default=None,
        help="start over when RUN_DIR holds another configuration (old files kept under superseded-*/)",
    )
    p.add_argument("--no-progress", dest="progress", action="store_false", default=None, help="no progress output")
    g = p.add_argument_group("model")
    g.add_argument("--model", dest="llm_model", help="model name (default gpt-5.4-nano)")
    g.add_argument("--base-url", dest="llm_base_url", help="OpenAI-compatible base URL (e.g. http://127.0.0.1:8765/v1)")
    g.add_argument("--api-key-env", dest="llm_api_key_env", help="variable holding the key (default OPENAI_API_KEY)")
    g.add_argument("--api", choices=["chat", "responses"], help="chat completions (default) or the Responses API")
    add_model_flags(g, "one agent turn", 16384)
    g.add_argument("--timeout", dest="llm_timeout_s", type=float, help="cap of one model call in seconds (600)")
    add_rate_flags(g)
    g.add_argument("--llm-concurrency", dest="llm_concurrency", type=int, help="model calls in flight per worker")


def config_from_args(args: argparse.Namespace):
    from rise_batch.agent.run_config import load_run_config

    over = {k: v for k, v in vars(args).items() if k not in ("config", "func", "command")}
    return load_run_config(args.config, **over)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        help="run agent trajectories of one agent system (rise, rise-bm25, ...) for a query file",
        description=(
            "Run one agent trajectory per query, each in its own workspace with its own budgets (model calls, "
            "wall clock), fanned across Ray actors. Writes RUN_DIR/run.json, RUN_DIR/trajectories/<query>.json and "
            "RUN_DIR/events.jsonl. Re-run the same command to resume: finished queries are skipped."
        ),
    )
    add_run_flags(p)
    p.add_argument("--json", action="store_true", help="print the full stats as JSON instead of the summary line")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rise_batch.agent.job import run_trajectories, summary_line
    from rise_batch.llm.simulated import cost_label
    from rise_batch.storage import redact

    want_json = args.json
    del args.json  # a command option, not a run setting
    cfg = config_from_args(args)
    stats = run_trajectories(cfg)
    label = cost_label(cfg.llm.base_url)
    if want_json:  # the summary once: the full stats for scripts, or the one line for people
        print(json.dumps(stats | {"cost_simulated": bool(label)}, sort_keys=True))
    else:
        print(summary_line(stats, redact(cfg.out)) + label)
    return 0
