"""`rise-batch structure`: corpus in, structured corpus + checkpoint + stats out (resumable)."""

from __future__ import annotations

import argparse
import json

from rise_batch.config import StructureConfig

# What `structure` (and jobs/structure_corpus.py) offers of StructureConfig, by --help section; each field's
from rise_batch.option_paths import URI, path_argument
from rise_batch.options import Layout, Section, add_layout

# What `structure` (and jobs/structure_corpus.py) offers of StructureConfig, by --help section; each field's
# default, type, help and flag are on the field (rise_batch/config.py), and docs/structuring.md's table is made
# from this too (rise_batch/commands/doc_options.py).
STRUCTURE_OPTIONS = Layout(
    StructureConfig,
    (
        Section(
            None,
            (
                *("corpus", "out", "backend", "columns", "limit", "on_bad_row", "shard_docs", "workers"),
                *("ray_address", "worker_memory_gb", "new_run", "index", "progress"),
            ),
        ),
        Section(
            "llm backend",
            tuple(
                f"llm.{k}"
                for k in (
                    *("base_url", "model", "api_key_env", "reasoning_effort", "max_output_tokens", "timeout_s"),
                    *("rpm", "tpm", "concurrency", "max_input_chars", "max_input_tokens", "structured_output"),
                    "max_transient_runs",
                )
            ),
        ),
        Section(
            "cost control",
            (
                *("mode", "max_cost_usd", "llm.prices_file", "tier"),
                *("batch.retry", "batch.poll_s", "batch.max_requests", "batch.max_active"),
            ),
        ),
    ),
)


def add_columns_flag(p: argparse.ArgumentParser) -> None:
    """--columns, the same for structure, index and plan: one syntax to read rows whose columns are named otherwise."""
    add_layout(p, Layout(StructureConfig, (Section(None, ("columns",)),)))


def add_structure_flags(p: argparse.ArgumentParser) -> None:
    """Flags shared by `structure` and jobs/structure_corpus.py; None means 'take the config file's value'."""
    path_argument(p, "--config", path=URI, help="YAML config (keys of StructureConfig; flags override it)")
    add_layout(p, STRUCTURE_OPTIONS)


def config_from_args(args: argparse.Namespace):
    from rise_batch.config import load_structure_config

    over = {k: v for k, v in vars(args).items() if k not in ("config", "func", "command")}
    return load_structure_config(args.config, **over)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "structure",
        help="add a line-numbered table of contents to every document of a corpus",
        description=(
            "Structure a corpus: propose sections (heuristic or LLM), validate their anchors, insert headings and "
            "a TOC. Writes OUT/corpus/<relpath>, OUT/docmap.parquet, OUT/checkpoint/*.parquet, "
            "OUT/bad_rows.parquet and OUT/stats.json. Re-run the same command to resume after any interruption."
        ),
    )
    add_structure_flags(p)
    p.add_argument("--json", action="store_true", help="print the full stats as JSON at the end")
    p.add_argument(
        "--verify",
        action="store_true",
        help="before resuming, check every checkpoint part's digest and rows against its done marker (resume always "
        "checks sizes, footers and row counts); damaged files go to OUT/damaged/ and their documents are redone",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rise_batch.commands.json_exit import json_on_every_exit
    from rise_batch.llm.simulated import cost_label
    from rise_batch.storage import redact
    from rise_batch.structuring.job import next_commands, run_structure, summary_line

    want_json, verify = args.json, args.verify
    del args.json, args.verify  # command options, not run settings (the manifest's config stays the same)
    cfg = config_from_args(args)
    label = cost_label(cfg.llm.base_url) if cfg.calls_llm else ""
    # --max-cost reached: BudgetExceeded, exit 3 (what the checkpoint records); documents left: RunIncomplete, 75
    with json_on_every_exit(want_json, lambda: checkpointed(cfg.out), {"cost_simulated": bool(label)}, indent=2):
        stats = run_structure(cfg, verify)
    if want_json:
        print(json.dumps(stats | {"cost_simulated": bool(label)}, indent=2, sort_keys=True))
    else:
        print(summary_line(stats, redact(cfg.out)) + label)
        for line in next_commands(stats, redact(cfg.out)):
            print(line)
    return 0


def checkpointed(out: str) -> dict:
    """What `--json` prints for a run stopped before its stats were summed (at --max-cost): what OUT's checkpoint
    records it paid."""
    from rise_batch.storage import redact
    from rise_batch.structuring.budget import checkpoint_cost

    return {"out": redact(out), "cost_usd": round(checkpoint_cost(out), 6)}
