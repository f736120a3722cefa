"""`rise-batch plan`: tokens, dollars (online and Batch API) and hours of a structuring run, before spending any."""

from __future__ import annotations

import argparse

from rise_batch.commands.structure import add_columns_flag


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="estimate tokens, cost and hours of structuring a corpus (nothing is sent)",
        description=(
            "Sample documents, build the real structuring requests (same prompt, input cut, too-short and tier "
            "rules, the request body with its JSON schema), count their tokens with the model's tokenizer (chars/4 "
            "without the `tokens` extra or for an unknown model, said so) and model the output from document length; "
            "print tokens, dollars online and with the Batch API (half price), and hours at the given limits. "
            "--target-usd proposes a tier rule and input cut that meet a budget and prints what each gives up."
        ),
    )
    p.add_argument("--corpus", required=True, help="Parquet file, directory of Parquet files, or JSONL[.gz]")
    add_columns_flag(p)
    p.add_argument("--model", default="gpt-5.4-nano", help="model to price (default gpt-5.4-nano)")
    p.add_argument("--mode", choices=["online", "batch"], default="online", help="the mode the run will use")
    p.add_argument("--sample", type=int, default=1000, help="documents to sample (default 1000)")
    p.add_argument("--docs", type=int, help="scale the estimate to this many documents (default: the corpus's rows)")
    p.add_argument("--rpm", type=int, default=500, help="requests per minute for the online hours (default 500)")
    p.add_argument(
        "--tpm", type=int, default=2_000_000, help="tokens per minute for the online hours (default 2,000,000)"
    )
    p.add_argument("--prompt", default="structure_toc.txt", help="structuring prompt (default structure_toc.txt)")
    p.add_argument("--max-input-chars", type=int, default=200_000, help="input budget per document (chars)")
    p.add_argument("--max-input-tokens", type=int, help="input budget per document (tokens of the model's tokenizer)")
    p.add_argument(
        "--no-structured-output",
        dest="structured_output",
        action="store_false",
        help="price requests without the TOC's JSON schema (as structure --no-structured-output sends them)",
    )
    p.add_argument(
        "--target-usd",
        type=float,
        metavar="USD",
        help="propose a tier rule ('chars>=N') and --max-input-tokens that meet USD at --mode, with what each gives up",
    )
    p.add_argument(
        "--target-margin",
        type=float,
        default=0.05,
        metavar="SHARE",
        help="with --target-usd: propose within USD less this share, for the sample's estimation error (default 0.05)",
    )
    p.add_argument("--llm-tier", dest="tier", help="price only these documents: 'chars>=N' or a docid list file")
    p.add_argument("--reasoning-tokens", type=float, default=0.0, help="reasoning tokens per request (output)")
    p.add_argument("--tokens-per-section", type=float, help="output tokens per proposed section (default 57)")
    p.add_argument("--section-scale-chars", type=float, help="sections = 12 * (1 - exp(-chars / this)); def. 8800")
    p.add_argument("--batch-queue-tokens", type=int, help="your enqueued-token limit for batches (waves of 24 h)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from rise_batch.errors import ConfigError
    from rise_batch.structuring.plan import OutputModel, format_plan, make_plan

    if args.max_input_tokens is not None and args.max_input_tokens <= 0:
        raise ConfigError(f"--max-input-tokens must be a positive integer, got {args.max_input_tokens}")
    if args.target_usd is not None and (args.target_usd <= 0 or args.tier or args.max_input_tokens):
        raise ConfigError("--target-usd needs a positive amount and proposes --llm-tier and --max-input-tokens itself")

    output = OutputModel(reasoning_tokens=args.reasoning_tokens)
    if args.tokens_per_section is not None:
        output = output._replace(tokens_per_section=args.tokens_per_section)
    if args.section_scale_chars is not None:
        output = output._replace(section_scale_chars=args.section_scale_chars)
    plan = make_plan(
        args.corpus,
        args.model,
        prompt=args.prompt,
        sample=args.sample,
        n_docs=args.docs,
        rpm=args.rpm,
        tpm=args.tpm,
        max_input_chars=args.max_input_chars,
        max_input_tokens=args.max_input_tokens,
        tier=args.tier,
        output=output,
        structured=args.structured_output,
        batch_queue_tokens=args.batch_queue_tokens,
        seed=args.seed,
        columns=args.columns or "",
    )
    target = _target(args, plan, output) if args.target_usd is not None else None
    if args.json:
        print(json.dumps(plan | {"mode": args.mode} | ({"target": target} if target else {}), indent=2))
    else:
        print(format_plan(plan, args.mode))
        if target:
            from rise_batch.structuring.plan_target import format_target

            print(format_target(target, args.mode))
    return 0


def _target(args: argparse.Namespace, plan: dict, output) -> dict:
    """The same sample (same seed) priced over the grid of tier rules and input cuts (structuring/plan_target.py)."""
    from rise_batch.llm.pricing import PriceTable
    from rise_batch.prompts import load_prompt
    from rise_batch.structuring.plan_sample import plan_sample
    from rise_batch.structuring.plan_target import price_options, target_plan

    drawn = plan_sample(args.corpus, args.sample, args.seed, columns=args.columns or "")
    options = price_options(
        drawn.docs,
        load_prompt(args.prompt),
        args.model,
        n_docs=plan["docs"],
        batch=args.mode == "batch",
        prices=PriceTable.load(),
        max_input_chars=args.max_input_chars,
        output=output,
        structured=args.structured_output,
        weights=drawn.weights,
    )
    return target_plan(options, args.target_usd, args.target_margin)
