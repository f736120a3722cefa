"""Tiered structuring: only a chosen subset of documents goes to the LLM, the rest get the free heuristic TOC.

At 1M documents the LLM bill is paid per document, while an agent reads only the documents its searches surface;
spending the LLM on the long documents (where a TOC saves the most reading) or on those a query log or retrieval run
surfaced most, and giving the rest the heuristic TOC, buys most of the benefit for a fraction of the cost. Each
checkpoint row records the tier that produced it (`DocResult.tier`: "llm" or "heuristic").

A rule is `chars>=N` (documents of at least N characters) or the path of a text file of docids, one per line
(blank lines and `#` comments ignored). The rule's identity enters the run hash: a resume with another rule would mix
outputs and is refused like any other change of settings.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import NamedTuple

from rise_batch.errors import ConfigError
from rise_batch.structure.backends import HeuristicBackend
from rise_batch.types import Doc, DocResult

_CHARS = re.compile(r"\s*chars\s*>=\s*(\d+)\s*")


class TierRule(NamedTuple):
    spec: str
    min_chars: int | None = None
    docids: frozenset[str] | None = None

    @property
    def identity(self) -> str:
        if self.docids is None:
            return f"chars>={self.min_chars}"
        digest = hashlib.sha256("\n".join(sorted(self.docids)).encode("utf-8", "surrogatepass")).hexdigest()[:16]
        return f"docids:{len(self.docids)}:{digest}"

    def wants_llm(self, doc: Doc) -> bool:
        if self.docids is not None:
            return doc.docid in self.docids
        return len(doc.text) >= (self.min_chars or 0)


def parse_tier(spec: str) -> TierRule:
    """`chars>=N` or a docid list file; a clear ConfigError otherwise."""
    m = _CHARS.fullmatch(spec)
    if m:
        return TierRule(spec, min_chars=int(m.group(1)))
    path = Path(spec)
    if not path.is_file():
        raise ConfigError(f"tier {spec!r}: expected 'chars>=N' or the path of a file of docids (one per line)")
    lines = (x.strip() for x in path.read_text(encoding="utf-8").splitlines())
    docids = frozenset(x for x in lines if x and not x.startswith("#"))
    if not docids:
        raise ConfigError(f"tier file {spec} lists no docids")
    return TierRule(spec, docids=docids)


def tier_rule(spec: str | None) -> TierRule | None:
    """The rule of a `tier` setting; None when it is unset (every document goes to the LLM)."""
    return None if spec is None else parse_tier(spec)


def goes_to_llm(rule: TierRule | None, doc: Doc) -> bool:
    """Which backend a document goes to: the LLM, unless a tier rule leaves it to the heuristic. The online
    backend, batch mode and the cost plan all ask this, so what is priced is what is sent."""
    return rule is None or rule.wants_llm(doc)


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
