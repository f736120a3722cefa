"""Estimate a structuring run before paying for it: tokens, dollars (online and Batch API) and hours at given limits.

A sample of the corpus goes through the real request path (the same input cut and `build_messages` as the LLM
backend, the request body `chat_request` builds, JSON schema included, the same too-short rule and tier rule), so
what is priced is what would be sent. Tokens are counted by `rise_batch.llm.tokens.counter_for(model)`: the model's
real encoding (o200k_base for gpt-5.x) with the `tokens` extra installed, the same counter the fake server bills
with and the limiter reserves with; chars/4 only for a model with no known encoding or without the package, which
the plan says (`token_count`).

Output tokens are modelled from document length: sections = max_sections * (1 - exp(-chars / scale)), each costing
about `tokens_per_section` tokens of JSON (title, description, anchor), plus reasoning tokens if the model spends
them. The defaults were fitted (least squares, o200k tokens) on 3,000 wiki2015 documents against the fake server's
proposals (bench/plan_accuracy.py re-measures them); a real model's figures should be re-fitted from a small pilot
run's checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from rise_batch.config import LLMConfig
from rise_batch.llm.pricing import PriceTable
from rise_batch.llm.tokens import TokenCounter, counter_for, message_text
from rise_batch.prompts import load_prompt
from rise_batch.structure.backends import model_input
from rise_batch.structure.heuristic import is_too_short
from rise_batch.structure.propose import TOC_RESPONSE_FORMAT, build_messages
from rise_batch.structuring.plan_options import PlanOptions
from rise_batch.structuring.plan_sample import plan_sample
from rise_batch.structuring.plan_sample import sample_docs as sample_docs  # re-exported: callers import it here
from rise_batch.tier_rule import goes_to_llm, tier_rule
from rise_batch.types import Doc

CACHE_MIN_TOKENS = 1024  # OpenAI caches a prompt prefix only from this length on


class OutputModel(NamedTuple):
    tokens_per_section: float = PlanOptions.tokens_per_section  # --tokens-per-section
    section_scale_chars: float = PlanOptions.section_scale_chars
    max_sections: int = 12
    base_tokens: float = 25.0
    reasoning_tokens: float = PlanOptions.reasoning_tokens  # per request, billed as output

    def sections(self, chars: int) -> float:
        return self.max_sections * (1.0 - math.exp(-chars / self.section_scale_chars))

    def tokens(self, chars: int) -> float:
        return self.base_tokens + self.tokens_per_section * self.sections(chars) + self.reasoning_tokens


DEFAULT_OUTPUT = OutputModel()


def messages_tokens(messages: Sequence[dict], counter: TokenCounter | None = None) -> int:
    return (counter or TokenCounter("chars/4")).messages(messages)


def request_tokens(messages: list[dict], model: str, counter: TokenCounter, structured: bool = True) -> int:
    """Prompt tokens of the request a run sends for `messages`: the body `chat_request` builds, with the TOC schema
    as `response_format` when structured outputs are on (llm/client.py), so the schema's tokens are priced too."""
    from rise_batch.llm.client import chat_request, format_params  # lazy: loads openai, aiohttp, tenacity (~4 s)

    cfg = LLMConfig(model=model, structured_output=structured)
    return counter.request(chat_request(cfg, messages, **format_params(cfg, TOC_RESPONSE_FORMAT)))


def request_cost(
    messages: Sequence[dict],
    model: str,
    prices: PriceTable,
    *,
    batch: bool = False,
    output: OutputModel = DEFAULT_OUTPUT,
    output_tokens: int | None = None,
) -> float:
    """Dollars of one structuring request: expected output from the model, or `output_tokens` (a worst case).
    Called per request by the cost guards, so long messages are counted by the limiter's sampled estimate."""
    if output_tokens is None:
        output_tokens = round(output.tokens(len(message_text(messages[-1]))))
    return prices.cost(model, counter_for(model).messages(messages, exact=False), 0, output_tokens, batch=batch)


class DocEstimate(NamedTuple):
    chars: int
    llm: bool  # a request would be sent
    input_tokens: int
    output_tokens: float
    truncated: bool
    sent_chars: int = 0  # characters of the document the model sees (after the input cut)


def estimate_doc(
    doc: Doc,
    prompt_text: str,
    *,
    model: str = "gpt-5.4-nano",
    max_input_chars: int = 200_000,
    max_input_tokens: int | None = None,
    tier=None,
    output: OutputModel = DEFAULT_OUTPUT,
    structured: bool = True,
) -> DocEstimate:
    if is_too_short(doc.text) or not goes_to_llm(tier, doc):
        return DocEstimate(len(doc.text), False, 0, 0.0, False)
    counter = counter_for(model)
    sent, note = model_input(doc.text, max_input_chars, max_input_tokens, counter)
    tokens = request_tokens(build_messages(sent, prompt_text), model, counter, structured)
    return DocEstimate(len(doc.text), True, tokens, output.tokens(len(sent)), bool(note), len(sent))


# -- the plan ---------------------------------------------------------------------------------------------------
MAX_FILE_REQUESTS = 50_000  # the Batch API's limit of requests per input file
MAX_FILE_BYTES = 200_000_000  # and of bytes per input file


class SampleTotals(NamedTuple):
    """The sample's estimates summed over the corpus: each sampled document weighted by the rows it stands for."""

    docs: float  # documents the plan is for
    requests: float
    input_tokens: float
    output_tokens: float
    truncated: float  # requests whose input was cut
    sent_chars: float  # of the documents sent, what the model sees
    llm_chars: float  # of the documents sent, their whole text
    all_chars: float  # of every document


def sample_totals(est: Sequence[DocEstimate], weights: Sequence[float], docs: float) -> SampleTotals:
    def total(value, only_llm: bool = True) -> float:
        return sum(w * value(e) for w, e in zip(weights, est, strict=True) if e.llm or not only_llm)

    return SampleTotals(
        docs=docs,
        requests=total(lambda e: 1),
        input_tokens=total(lambda e: e.input_tokens),
        output_tokens=total(lambda e: e.output_tokens),
        truncated=total(lambda e: e.truncated),
        sent_chars=total(lambda e: e.sent_chars),
        llm_chars=total(lambda e: e.chars),
        all_chars=total(lambda e: e.chars, False),
    )


def batch_file_requests(est: Sequence[DocEstimate], prompt_text: str) -> int:
    """Requests per Batch API input file: the request limit, or fewer when the mean request line (the text sent, the
    prompt and about 2,000 bytes of JSON) would pass the file size limit."""
    llm = [e for e in est if e.llm]
    mean_line = (sum(e.sent_chars for e in llm) / len(llm) + len(prompt_text) + 2000) if llm else 0
    return min(MAX_FILE_REQUESTS, int(MAX_FILE_BYTES // mean_line)) if mean_line else MAX_FILE_REQUESTS


def plan_costs(
    t: SampleTotals,
    cached: float,
    model: str,
    prices: PriceTable,
    *,
    rpm: int,
    tpm: int,
    per_file: int,
    batch_queue_tokens: int | None,
) -> dict[str, Any]:
    """The plan's tokens, dollars (online and Batch API), hours and batch files, from the sample's totals."""

    def dollars(batch: bool) -> float:
        return prices.cost(model, round(t.input_tokens), round(cached), round(t.output_tokens), batch=batch)

    n = t.requests
    minutes = max(n / rpm, (t.input_tokens + t.output_tokens) / tpm) if n else 0.0
    return {
        "requests": round(n),
        "input_tokens": round(t.input_tokens),
        "cached_input_tokens": round(cached),
        "output_tokens": round(t.output_tokens),
        "input_tokens_per_request": t.input_tokens / n if n else 0.0,
        "output_tokens_per_request": t.output_tokens / n if n else 0.0,
        "usd_online": dollars(False),
        "usd_batch": dollars(True),
        "usd_per_doc_online": dollars(False) / t.docs,
        "usd_per_doc_batch": dollars(True) / t.docs,
        "rpm": rpm,
        "tpm": tpm,
        "hours_online": minutes / 60,
        "batch_files": math.ceil(n / per_file) if n else 0,
        "batch_requests_per_file": per_file,
        "batch_waves": math.ceil(t.input_tokens / batch_queue_tokens) if batch_queue_tokens and n else None,
    }


def make_plan(
    corpus: str | Path,
    model: str,
    *,
    prompt: str = "structure_toc.txt",
    sample: int = 1000,
    n_docs: int | None = None,
    rpm: int = 500,
    tpm: int = 2_000_000,
    max_input_chars: int = 200_000,
    max_input_tokens: int | None = None,
    tier: str | None = None,
    output: OutputModel = DEFAULT_OUTPUT,
    structured: bool = True,
    batch_queue_tokens: int | None = None,
    prices: PriceTable | None = None,
    seed: int = 0,
    columns: str = "",
    calibrate: bool = True,
) -> dict[str, Any]:
    """Everything `rise-batch plan` prints, as a dict (n_docs: scale the sample to this many documents).

    Totals weight each sampled document by the rows it stands for (structuring/plan_sample.py: calibrated on the
    corpus's text bytes when the Parquet footers give them; `calibrate=False` scales simply, for comparison)."""
    prices = prices or PriceTable.load()
    prompt_text = load_prompt(prompt)
    rule = tier_rule(tier)
    drawn = plan_sample(corpus, sample, seed, columns=columns, calibrate=calibrate)
    docs, rows = drawn.docs, drawn.rows
    if not docs:
        raise ValueError(f"{corpus}: no valid documents to sample")
    counter = counter_for(model)
    options = {"model": model, "max_input_chars": max_input_chars, "max_input_tokens": max_input_tokens}
    est = [estimate_doc(d, prompt_text, **options, tier=rule, output=output, structured=structured) for d in docs]
    total_docs = n_docs if n_docs is not None else rows
    weights = [w * total_docs / rows for w in drawn.weights]  # documents each sampled one stands for
    t = sample_totals(est, weights, total_docs)
    any_llm = any(e.llm for e in est)
    prefix = messages_tokens(build_messages("", prompt_text)[:1], counter)
    cacheable = prefix >= CACHE_MIN_TOKENS
    cached = (prefix // 128) * 128 * max(t.requests - 1, 0) if cacheable else 0
    limits = {"rpm": rpm, "tpm": tpm, "batch_queue_tokens": batch_queue_tokens}
    costs = plan_costs(t, cached, model, prices, per_file=batch_file_requests(est, prompt_text), **limits)
    tokens = " (the model's encoding; the fake server bills the same)" if counter.exact else " (estimate: no tokenizer)"
    return (
        {
            "corpus": str(corpus),
            "model": model,
            "price_known": prices.price(model) is not None,
            "prompt": prompt,
            "prompt_tokens": prefix,
            "prompt_cached": cacheable,
            "docs": total_docs,
            "corpus_rows": rows,
            "sampled_docs": len(est),
            "sampling": drawn.method,
            "llm_share": t.requests / total_docs,
            "truncated_share": t.truncated / t.requests if any_llm else 0.0,
            "text_cut_share": 1 - t.sent_chars / t.llm_chars if any_llm else 0.0,
            "llm_text_share": t.sent_chars / t.all_chars,
            "tier": tier,
            "max_input_tokens": max_input_tokens,
            "mean_chars": t.all_chars / total_docs,
        }
        | costs
        | {"token_count": counter.name + tokens, "structured_output": structured, "output_model": output._asdict()}
    )


def format_plan(p: dict[str, Any], mode: str = "online") -> str:
    """The table `rise-batch plan` prints."""
    n = p["docs"]
    rows = [
        f"plan for {p['corpus']} with {p['model']} ({mode} mode)",
        f"  documents            {n:>16,}   (sampled {p['sampled_docs']:,} of {p['corpus_rows']:,} rows)",
        f"  sent to the LLM      {p['requests']:>16,}   ({p['llm_share']:.1%}; the rest too short or heuristic tier)",
        f"  input tokens         {p['input_tokens']:>16,}   ({p['input_tokens_per_request']:,.0f} per request; "
        f"{p['truncated_share']:.2%} cut to the input budget, {p['text_cut_share']:.1%} of their text)",
        f"  cached input tokens  {p['cached_input_tokens']:>16,}   (prompt prefix {p['prompt_tokens']} tokens"
        + ("" if p["prompt_cached"] else f" < {CACHE_MIN_TOKENS}: not cacheable")
        + ")",
        f"  output tokens        {p['output_tokens']:>16,}   ({p['output_tokens_per_request']:,.0f} per request)",
        f"  {'':<20} {'online':>16}   {'batch':>12}",
        f"  cost (USD)           {p['usd_online']:>16,.2f}   {p['usd_batch']:>12,.2f}"
        + ("" if p["price_known"] else "   (model not in the price table: $0)"),
        f"  cost per document    {p['usd_per_doc_online']:>16,.6f}   {p['usd_per_doc_batch']:>12,.6f}",
        f"  hours                {p['hours_online']:>16,.1f}   {'<= 24 per wave':>12}   "
        f"(online at rpm={p['rpm']:,}, tpm={p['tpm']:,})",
        f"  batch input files    {p['batch_files']:>16,}   (<= {p['batch_requests_per_file']:,} requests each)"
        + (f"; {p['batch_waves']} waves under the enqueued-token limit" if p["batch_waves"] else ""),
        f"  tokens: {p['token_count']}",
        f"  sampling: {p['sampling']}",
    ]
    return "\n".join(rows)
