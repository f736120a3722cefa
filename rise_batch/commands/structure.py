"""`rise-batch structure`: corpus in, structured corpus + checkpoint + stats out (resumable)."""

from __future__ import annotations

import argparse
import json

from rise_batch.registry import BACKENDS


def add_columns_flag(p: argparse.ArgumentParser) -> None:
    """--columns, the same for structure, index and plan: one syntax to read rows whose columns are named otherwise."""
    from rise_batch.corpus.readers import COLUMNS_HELP

    p.add_argument("--columns", metavar="FIELD=COL,...", help=COLUMNS_HELP)


def add_model_flags(g: argparse._ActionsContainer, what: str, max_output_tokens: int) -> None:
    """--reasoning-effort and --max-output-tokens, for structure, run and their jobs/ scripts (defaults shown)."""
    g.add_argument(
        "--reasoning-effort",
        dest="llm_reasoning_effort",
        help="reasoning effort of reasoning models: none, minimal, low, medium, high or xhigh (default: the model's)",
    )
    g.add_argument(
        "--max-output-tokens",
        dest="llm_max_output_tokens",
        type=int,
        help=f"cap of {what}'s tokens, reasoning included; reserved against --tpm (default {max_output_tokens})",
    )


def add_rate_flags(g: argparse._ActionsContainer) -> None:
    """--rpm and --tpm with their defaults (LLMConfig's), which a user pointing at a local server must raise."""
    g.add_argument(
        "--rpm",
        dest="llm_rpm",
        type=int,
        help="requests per minute, whole job (default 500; raise it for a local server)",
    )
    g.add_argument("--tpm", dest="llm_tpm", type=int, help="tokens per minute, whole job (default 2,000,000)")


def add_structure_flags(p: argparse.ArgumentParser) -> None:
    """Flags shared by `structure` and jobs/structure_corpus.py; None means 'take the config file's value'."""
    p.add_argument("--config", help="YAML config (keys of StructureConfig; flags override it)")
    p.add_argument(
        "--corpus", help="Parquet file, directory of Parquet files, or JSONL[.gz] (docid, text, url?, title?)"
    )
    p.add_argument("--out", help="output directory (created; re-running the same command resumes)")
    p.add_argument(
        "--backend",
        choices=list(BACKENDS),
        help="heuristic: free, offline (default); llm: any OpenAI-compatible endpoint",
    )
    add_columns_flag(p)
    p.add_argument("--limit", type=int, help="structure only the first N valid documents")
    p.add_argument(
        "--on-bad-row",
        choices=["error", "skip"],
        help="bad rows stop the job (default) or are recorded in bad_rows.parquet",
    )
    p.add_argument("--shard-docs", type=int, help="rows per shard (default 1000)")
    p.add_argument(
        "--workers", type=int, help="0: run in this process; N>=1: N Ray actors (default 0 heuristic, 2 llm)"
    )
    p.add_argument("--ray-address", help="connect to this Ray cluster (default: start a local Ray when workers >= 1)")
    p.add_argument(
        "--new-run",
        action="store_true",
        default=None,
        help="start over when OUT holds a different run (old outputs kept under superseded-*/)",
    )
    p.add_argument("--index", action="store_true", default=None, help="also build the BM25 index into OUT/index")
    p.add_argument(
        "--no-progress", dest="progress", action="store_false", default=None, help="no progress bar or lines"
    )
    add_llm_backend_flags(p.add_argument_group("llm backend"))
    add_cost_flags(p.add_argument_group("cost control"))


def add_llm_backend_flags(g: argparse._ActionsContainer) -> None:
    """The endpoint, model and request settings of the llm backend (LLMConfig's keys, as `llm_*` overrides)."""
    g.add_argument("--base-url", dest="llm_base_url", help="OpenAI-compatible base URL (e.g. http://127.0.0.1:8000/v1)")
    g.add_argument("--model", dest="llm_model", help="model name (default gpt-5.4-nano)")
    g.add_argument(
        "--api-key-env",
        dest="llm_api_key_env",
        help="environment variable holding the key (default OPENAI_API_KEY)",
    )
    add_model_flags(g, "one reply", 4096)
    g.add_argument("--timeout", dest="llm_timeout_s", type=float, help="per-request timeout in seconds")
    add_rate_flags(g)
    g.add_argument("--concurrency", dest="llm_concurrency", type=int, help="requests in flight per worker")
    g.add_argument(
        "--max-input-chars", dest="llm_max_input_chars", type=int, help="cut longer documents (recorded per row)"
    )
    g.add_argument(
        "--max-input-tokens",
        dest="llm_max_input_tokens",
        type=int,
        help="cut documents longer than this many tokens of the model's tokenizer, at a line break (recorded per row)",
    )
    g.add_argument(
        "--no-structured-output",
        dest="llm_structured_output",
        action="store_false",
        default=None,
        help="do not send the TOC's JSON schema as response_format (for providers without structured outputs; a "
        "server that refuses it switches it off by itself, after one refused request per worker)",
    )


def add_cost_flags(g: argparse._ActionsContainer) -> None:
    """What a run may spend and how: online or Batch API, the cost cap, prices, the LLM tier, batch settings."""
    g.add_argument("--mode", choices=["online", "batch"], help="online (default) or the OpenAI Batch API (half price)")
    g.add_argument(
        "--max-cost",
        dest="max_cost_usd",
        type=float,
        metavar="USD",
        help="stop cleanly (exit code 3) before the run's total cost would pass USD; re-run with more to continue",
    )
    g.add_argument(
        "--prices-file",
        dest="llm_prices_file",
        metavar="YAML",
        help="prices of models not in the packaged table (or overriding it): `models: {NAME: {input: USD, "
        "cached_input: USD, output: USD}}` per 1M tokens; --max-cost refuses to start on a model without a price",
    )
    g.add_argument(
        "--llm-tier",
        dest="tier",
        metavar="RULE",
        help="only these documents go to the LLM, the rest get the heuristic TOC: 'chars>=N' or a docid list file",
    )
    g.add_argument(
        "--batch-retry",
        dest="batch_retry",
        choices=["online", "batch"],
        help="batch mode: failed/expired lines and re-asks go online (default) or into a new batch round",
    )
    g.add_argument("--batch-poll-s", dest="batch_poll_s", type=float, help="batch mode: seconds between polls")
    g.add_argument("--batch-max-requests", dest="batch_max_requests", type=int, help="requests per batch file")
    g.add_argument("--batch-max-active", dest="batch_max_active", type=int, help="packs (batch files) in flight")


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
    from rise_batch.llm.simulated import cost_label
    from rise_batch.storage import redact
    from rise_batch.structuring.job import next_commands, run_structure, summary_line

    want_json, verify = args.json, args.verify
    del args.json, args.verify  # command options, not run settings (the manifest's config stays the same)
    cfg = config_from_args(args)
    stats = run_structure(cfg, verify)  # --max-cost reached: BudgetExceeded, exit 3 (rise_batch.errors)
    label = cost_label(cfg.llm.base_url) if cfg.calls_llm else ""
    if want_json:
        print(json.dumps(stats | {"cost_simulated": bool(label)}, indent=2, sort_keys=True))
    else:
        print(summary_line(stats, redact(cfg.out)) + label)
        for line in next_commands(stats, redact(cfg.out)):
            print(line)
    return 0
