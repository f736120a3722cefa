"""`rise-batch plan`'s settings, one field each (rise_batch/options.py): the flags and docs/structuring.md's table
are made from them, and the output model's defaults (structuring/plan.py OutputModel) are read from them.

The settings `plan` shares with a structuring run (model, rpm, tpm, prompt, input cuts, mode, tier) are
StructureConfig's and LLMConfig's fields (`same_as`), so a plan prices what `structure` would send by default.
"""

from __future__ import annotations

from dataclasses import dataclass

from rise_batch.config import LLMConfig, StructureConfig
from rise_batch.options import Entry, Layout, Section, option, same_as


@dataclass(frozen=True)
class PlanOptions:
    corpus: str = same_as(StructureConfig, "corpus")
    model: str = same_as(LLMConfig, "model", help="model to price")
    prices_file: str | None = same_as(
        LLMConfig,
        "prices_file",
        help="prices of models not in the packaged table (or overriding it): `models: {NAME: {input: USD, "
        "cached_input: USD, output: USD}}` per 1M tokens; a model without a price is refused",
    )
    mode: str = same_as(StructureConfig, "mode", help="the mode the run will use")
    sample: int = option(1000, help="documents to sample")
    docs: int | None = option(None, help="scale the estimate to this many documents", shown="the corpus's rows")
    rpm: int = same_as(LLMConfig, "rpm", help="requests per minute for the online hours")
    tpm: int = same_as(LLMConfig, "tpm", help="tokens per minute for the online hours")
    prompt: str = same_as(StructureConfig, "prompt", help="structuring prompt")
    max_input_chars: int = same_as(LLMConfig, "max_input_chars", help="input budget per document (chars)")
    max_input_tokens: int | None = same_as(
        LLMConfig, "max_input_tokens", help="input budget per document (tokens of the model's tokenizer)"
    )
    structured_output: bool = same_as(
        LLMConfig,
        "structured_output",
        help="price requests without the TOC's JSON schema (as structure --no-structured-output sends them)",
    )
    target_usd: float | None = option(
        None,
        metavar="USD",
        help="propose a tier rule ('chars>=N') and --max-input-tokens that meet USD at --mode, with what each gives up",
    )
    target_margin: float = option(
        0.05,
        metavar="SHARE",
        help="with --target-usd: propose within USD less this share, for the sample's estimation error",
    )
    tier: str | None = same_as(
        StructureConfig, "tier", metavar=None, help="price only these documents: 'chars>=N' or a docid list file"
    )
    reasoning_tokens: float = option(0.0, help="reasoning tokens per request (output)")
    # o200k tokens of one {"title", "description", "anchor"} entry
    tokens_per_section: float = option(57.0, help="output tokens per proposed section")
    section_scale_chars: float = option(8_800.0, help="sections = 12 * (1 - exp(-chars / this))")
    batch_queue_tokens: int | None = option(None, help="your enqueued-token limit for batches (waves of 24 h)")
    seed: int = option(0, help="sampling seed")
    json: bool = option(False, help="print the plan as JSON")


_KEYS = (
    *("model", "prices_file", "mode", "sample", "docs", "rpm", "tpm", "prompt", "max_input_chars", "max_input_tokens"),
    *("structured_output", "target_usd", "target_margin", "tier", "reasoning_tokens", "batch_queue_tokens"),
    *("seed", "json"),
)
# flags default to the fields' (there is no plan config file), but for the output model's two constants, whose
# flags stay None ("not given": OutputModel's defaults, which are these fields')
PLAN_OPTIONS = Layout(PlanOptions, (Section(None, (Entry("corpus", required=True), *_KEYS)),), from_file=False)
PLAN_OUTPUT_OPTIONS = Layout(PlanOptions, (Section(None, ("tokens_per_section", "section_scale_chars")),))
