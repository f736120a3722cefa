"""`rise-batch run`: agent trajectories for a query file, one JSON per query in RUN_DIR (resumable)."""

from __future__ import annotations

import argparse
import json

from rise_batch.agent.run_config import RunConfig

# What `run` (and jobs/run_trajectories.py) offers of RunConfig, by --help section; each field's default, type, help
from rise_batch.option_paths import URI, path_argument
from rise_batch.options import Entry, Layout, Section, add_layout

# What `run` (and jobs/run_trajectories.py) offers of RunConfig, by --help section; each field's default, type, help
# and flag are on the field (rise_batch/agent/run_config.py, rise_batch/config.py's LLMConfig), and docs/agents.md's
# table is made from this too (rise_batch/commands/doc_options.py).
RUN_OPTIONS = Layout(
    RunConfig,
    (
        Section(
            None,
            (
                *("queries", "system", "index", "docs", "original_docs", "out", "k", "max_calls", "wall_clock_s"),
                *("limit", "gold", "qrels", "workers", "concurrency", "ray_address", "workspace_root", "cache_dir"),
                "worker_memory_gb",
                *("keep_workspaces", "index_backend", "retriever", "embedder", "allow_unsandboxed", "new_run"),
                *("progress", "max_cost_usd", "pilot"),
            ),
        ),
        Section(
            "model",
            (
                *("llm.model", "llm.base_url", "llm.api_key_env", "api", "llm.reasoning_effort"),
                *("llm.max_output_tokens", "llm.timeout_s", "llm.rpm", "llm.tpm", "llm.max_transient_runs"),
                Entry(
                    "llm.concurrency",
                    flag="--llm-concurrency",
                    help="model calls in flight per worker",
                    shown="the worker's share of --concurrency",
                ),
            ),
        ),
    ),
)


def add_run_flags(p: argparse.ArgumentParser) -> None:
    """Flags shared by `run` and jobs/run_trajectories.py; None means 'take the config file's value'."""
    path_argument(
        p, "--config", path=URI, help="YAML config (keys of RunConfig, optionally under `run:`; flags override it)"
    )
    add_layout(p, RUN_OPTIONS)


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
    p.add_argument(
        "--plan",
        action="store_true",
        help="run a seeded pilot of --pilot queries (kept: the next run resumes past it), then print what the rest "
        "will cost (dollars with a 95%% interval, model calls, tokens, hours) and exit without running it",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rise_batch.agent.job import run_trajectories, summary_line
    from rise_batch.commands.json_exit import json_on_every_exit
    from rise_batch.llm.simulated import cost_label
    from rise_batch.storage import redact

    want_json, want_plan = args.json, args.plan
    del args.json, args.plan  # command options, not run settings
    cfg = config_from_args(args)
    label = cost_label(cfg.llm.base_url)
    # --max-cost reached: CostLimitReached, exit 3; transient failures left: RunIncomplete, exit 75 (both with stats)
    with json_on_every_exit(want_json, lambda: recorded(cfg.out), {"cost_simulated": bool(label)}):
        stats = run_trajectories(cfg, pilot_only=want_plan)
    if want_plan:
        from rise_batch.agent.pilot import plan_text
        from rise_batch.commands.plan_check import save_plan
        from rise_batch.storage import location

        plan = stats["plan"] | {"cost_simulated": bool(label)}
        save_plan(cfg.out, plan, [location(cfg.out)])  # the run that follows checks its spend against it
        print(json.dumps(plan, sort_keys=True) if want_json else plan_text(plan, redact(cfg.out)) + label)
        return 0
    from rise_batch.commands.plan_check import check_run

    checked = check_run(cfg.out, stats["config_hash"])
    if want_json:  # the summary once: the full stats for scripts, or the one line for people
        extra = {"planned": checked[1]} if checked else {}
        print(json.dumps(stats | {"cost_simulated": bool(label)} | extra, sort_keys=True))
    else:
        print(summary_line(stats, redact(cfg.out)) + label)
        if checked:
            print(checked[0] + label)
    return 0


def recorded(out: str) -> dict:
    """What `--json` prints for a run that stopped before its stats were summed: what RUN_DIR records it paid."""
    from rise_batch.money.spent import spent_usd
    from rise_batch.storage import location, redact

    where = location(out)
    return {"out": redact(out)} | ({"spent_usd": round(spent_usd(where), 6)} if where.exists() else {})
