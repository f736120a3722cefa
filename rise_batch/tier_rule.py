"""The `tier` setting parsed: which documents of a tiered run go to the LLM (the rest get the heuristic TOC).

A rule is `chars>=N` (documents of at least N characters) or the path of a text file of docids, one per line
(blank lines and `#` comments ignored). The rule's identity enters the run hash: a resume with another rule would mix
outputs and is refused like any other change of settings. It sits below config.py, which validates the setting and
hashes the rule; the tiered backend itself is rise_batch.structure.tier.
"""

from __future__ import annotations

import hashlib
import re
from typing import NamedTuple

from rise_batch.errors import ConfigError
from rise_batch.storage import location
from rise_batch.types import Doc

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
    path = location(spec)  # a path or a URI
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
