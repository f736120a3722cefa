"""`rise-batch plan --target-usd X`: a tier rule and an input cut that fit a budget, and what each gives up.

Two levers cut the bill without changing the model. The tier rule `chars>=N` gives documents shorter than N the
free heuristic TOC: each request pays the fixed prompt (~700 tokens) and a reply whatever the document's length,
so short documents are the dearest per character structured. The input cut `--max-input-tokens T` sends only the
first T tokens of a long document (at a line break): its tail gets no section of its own. Every (N, T) of a grid is
priced on one sample, through the same request path as the plan (estimate_doc), and the option kept is the one
that lets the LLM see the largest share of the corpus's text within the budget (ties: the cheaper one). What it
gives up is printed with it: the share of documents left to the heuristic, and the share of the LLM documents'
text cut off. Prompt caching is not counted on (a structuring prompt under 1,024 tokens is never cached, and
caching is best effort), so the figures are upper bounds for a cacheable prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from rise_batch.llm.pricing import PriceTable
from rise_batch.structuring.plan import DEFAULT_OUTPUT, DocEstimate, OutputModel, estimate_doc
from rise_batch.types import Doc

CUTS: tuple[int | None, ...] = (None, 16_000, 8_000, 6_000, 4_000, 3_000, 2_000, 1_500, 1_000, 600)
TIER_QUANTILES = tuple(q / 100 for q in range(100))


class Option(NamedTuple):
    min_chars: int  # documents shorter than this get the heuristic TOC (0: no tier rule)
    max_input_tokens: int | None  # None: no token cut
    usd: float  # the whole corpus (scaled), at the plan's mode
    llm_docs_share: float  # of all documents: structured by the LLM
    heuristic_docs_share: float  # of all documents: long enough for a TOC but left to the heuristic
    llm_text_share: float  # of all text: seen by the LLM
    text_cut_share: float  # of the LLM documents' text: cut off before sending

    @property
    def flags(self) -> str:
        parts = [f"--llm-tier 'chars>={self.min_chars}'"] if self.min_chars else []
        parts += [f"--max-input-tokens {self.max_input_tokens}"] if self.max_input_tokens else []
        return " ".join(parts) or "(no tier rule, no cut)"


def price_options(
    docs: list[Doc],
    prompt_text: str,
    model: str,
    *,
    n_docs: int,
    batch: bool,
    prices: PriceTable,
    max_input_chars: int = 200_000,
    output: OutputModel = DEFAULT_OUTPUT,
    structured: bool = True,
    weights: Sequence[float] | None = None,
) -> list[Option]:
    """Every (tier threshold, input cut) of the grid, priced on `docs` and scaled to `n_docs` documents: each by
    its weight (plan_sample's, calibrated on the corpus's text bytes; they must sum to the corpus's rows), or
    evenly when `weights` is None."""
    opts = {"model": model, "max_input_chars": max_input_chars, "output": output, "structured": structured}
    base = [estimate_doc(d, prompt_text, **opts) for d in docs]
    by_cut: dict[int | None, list[DocEstimate]] = {}
    for cut in CUTS:  # only documents over the cut are counted again (the prompt alone is ~700 tokens)
        by_cut[cut] = [
            estimate_doc(d, prompt_text, **opts, max_input_tokens=cut) if cut and e.llm and e.input_tokens > cut else e
            for d, e in zip(docs, base, strict=True)
        ]
    lengths = sorted(e.chars for e in base if e.llm)
    thresholds = sorted({0, *(lengths[int(q * len(lengths))] for q in TIER_QUANTILES if lengths)})
    rows = sum(weights) if weights is not None else len(docs)
    w = [x * n_docs / rows for x in weights] if weights is not None else [n_docs / len(docs)] * len(docs)
    total_chars = sum(x * e.chars for x, e in zip(w, base, strict=True)) or 1

    def usd(e: DocEstimate) -> float:
        return prices.cost(model, e.input_tokens, 0, round(e.output_tokens), batch=batch)

    options = []
    for cut, ests in by_cut.items():
        costs = [usd(e) if e.llm else 0.0 for e in ests]
        llm_docs = sum(x for x, e in zip(w, ests, strict=True) if e.llm)
        for n in thresholds:
            chosen = [(x, e, c) for x, e, c in zip(w, ests, costs, strict=True) if e.llm and e.chars >= n]
            sent = sum(x * e.sent_chars for x, e, _ in chosen)
            whole = sum(x * e.chars for x, e, _ in chosen)
            chosen_docs = sum(x for x, _, _ in chosen)
            options.append(
                Option(
                    min_chars=n,
                    max_input_tokens=cut,
                    usd=sum(x * c for x, _, c in chosen),
                    llm_docs_share=chosen_docs / n_docs,
                    heuristic_docs_share=(llm_docs - chosen_docs) / n_docs,
                    llm_text_share=sent / total_chars,
                    text_cut_share=1 - sent / whole if whole else 0.0,
                )
            )
    return options


def best(options: list[Option], target_usd: float, *, tier: bool = True, cut: bool = True) -> Option | None:
    """The option within `target_usd` whose LLM sees the most text (ties: cheaper); `tier`/`cut` False: only
    options that do not use that lever."""
    fits = [
        o for o in options if o.usd <= target_usd and (tier or o.min_chars == 0) and (cut or o.max_input_tokens is None)
    ]
    return max(fits, key=lambda o: (o.llm_text_share, -o.usd), default=None)


DEFAULT_MARGIN = 0.05


def target_plan(options: list[Option], target_usd: float, margin: float = DEFAULT_MARGIN) -> dict[str, Any]:
    """The proposal and the two one-lever alternatives; a ValueError naming the cheapest option when none fits.

    Options are held to the target less `margin`: the estimate is a sample's, and a tier rule prices only the
    documents above its threshold, so its error is larger than the whole corpus's (simulated over 300 seeds of
    1,000 wiki2015 docs: 1.9% mean, 6.9% worst). Without it, the $300 proposal for 1M docs was counted at $303.
    """
    if not 0 <= margin < 1:
        raise ValueError(f"--target-margin must be in [0, 1), got {margin!r}")
    budget = target_usd * (1 - margin)
    chosen = best(options, budget)
    if chosen is None:
        cheapest = min(options, key=lambda o: o.usd)
        raise ValueError(
            f"no tier rule and input cut of the grid meets ${target_usd:,.2f} less its {margin:.0%} margin "
            f"(${budget:,.2f}): the cheapest, {cheapest.flags}, costs ${cheapest.usd:,.2f}; raise --target-usd, "
            "lower --target-margin or use --llm-tier with a docid list"
        )
    return {
        "target_usd": target_usd,
        "margin": margin,
        "budget_usd": budget,
        "proposal": chosen._asdict() | {"flags": chosen.flags},
        "tier_only": _dict(best(options, budget, cut=False)),
        "cut_only": _dict(best(options, budget, tier=False)),
    }


def _dict(o: Option | None) -> dict[str, Any] | None:
    return None if o is None else o._asdict() | {"flags": o.flags}


def format_target(t: dict[str, Any], mode: str) -> str:
    within = f"${t['target_usd']:,.2f} less a {t['margin']:.0%} margin for the sample's error (${t['budget_usd']:,.2f})"
    lines = [f"within {within} ({mode} mode), what each option gives up:"]
    for label in ("proposal", "tier_only", "cut_only"):
        o = t[label]
        if o is None:
            lines.append(f"  {label:<9} none fits")
            continue
        lines.append(
            f"  {label:<9} ${o['usd']:>10,.2f}  {o['flags']}\n"
            f"  {'':<9} LLM structures {o['llm_docs_share']:.1%} of documents (sees {o['llm_text_share']:.1%} of "
            f"the text), heuristic {o['heuristic_docs_share']:.1%}; {o['text_cut_share']:.1%} of the LLM "
            "documents' text cut"
        )
    return "\n".join(lines)
