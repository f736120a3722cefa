"""`rise-batch plan`: tokens, dollars (online and Batch API) and hours of a structuring run, before spending any."""

from __future__ import annotations

import argparse

from rise_batch.commands.structure import add_columns_flag
from rise_batch.options import add_layout
from rise_batch.structuring.plan_options import PLAN_OPTIONS, PLAN_OUTPUT_OPTIONS


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
    add_layout(p, PLAN_OPTIONS)
    add_columns_flag(p)
    add_layout(p, PLAN_OUTPUT_OPTIONS)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from rise_batch.errors import ConfigError
    from rise_batch.llm.pricing import PriceTable
    from rise_batch.structuring.plan import OutputModel, format_plan, make_plan

    if args.max_input_tokens is not None and args.max_input_tokens <= 0:
        raise ConfigError(f"--max-input-tokens must be a positive integer, got {args.max_input_tokens}")
    if args.target_usd is not None and (args.target_usd <= 0 or args.tier or args.max_input_tokens):
        raise ConfigError("--target-usd needs a positive amount and proposes --llm-tier and --max-input-tokens itself")
    prices = PriceTable.load([args.prices_file] if args.prices_file else [])
    prices.require(args.model, "a plan in dollars")  # refused as --max-cost does: $0 replies would make it a lie

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
        prices=prices,
    )
    target = _target(args, plan, output, prices) if args.target_usd is not None else None
    if args.json:
        print(json.dumps(plan | {"mode": args.mode} | ({"target": target} if target else {}), indent=2))
    else:
        print(format_plan(plan, args.mode))
        if target:
            from rise_batch.structuring.plan_target import format_target

            print(format_target(target, args.mode))
    return 0


def _target(args: argparse.Namespace, plan: dict, output, prices) -> dict:
    """The same sample (same seed) priced over the grid of tier rules and input cuts (structuring/plan_target.py)."""
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
        prices=prices,
        max_input_chars=args.max_input_chars,
        output=output,
        structured=args.structured_output,
        weights=drawn.weights,
    )
    return target_plan(options, args.target_usd, args.target_margin)
