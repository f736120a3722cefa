"""Tiered structuring: only a chosen subset of documents goes to the LLM, the rest get the free heuristic TOC.

At 1M documents the LLM bill is paid per document, while an agent reads only the documents its searches surface;
spending the LLM on the long documents (where a TOC saves the most reading) or on those a query log or retrieval run
surfaced most, and giving the rest the heuristic TOC, buys most of the benefit for a fraction of the cost. Each
checkpoint row records the tier that produced it (`DocResult.tier`: "llm" or "heuristic").

The rule (`chars>=N` or a docid list file) is parsed by rise_batch.tier_rule, below config.py, which validates it.
"""

from __future__ import annotations

from rise_batch.structure.backends import HeuristicBackend
from rise_batch.tier_rule import TierRule, goes_to_llm
from rise_batch.types import Doc, DocResult


class TieredBackend:
    """The LLM backend for the documents the rule selects, the heuristic for the others (same run hash)."""

    name = "llm"

    def __init__(self, llm, rule: TierRule) -> None:
        self.llm, self.rule = llm, rule
        self.heuristic = HeuristicBackend()

    async def structure(self, doc: Doc, run_hash: str) -> tuple[DocResult, str]:
        if goes_to_llm(self.rule, doc):
            return await self.llm.structure(doc, run_hash)
        return self.heuristic.structure_sync(doc, run_hash)
