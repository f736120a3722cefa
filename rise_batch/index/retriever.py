"""The retrieval boundary: every command that searches names a retriever, and this module opens it.

A retriever is anything with `search(queries: list[str], k) -> list[Hits]` (best first), `docids` and `len()`;
the workspace, the agent tools and recall@K only ever call that. The registered ones
(rise_batch/index/retriever_kinds.py, where a new one is added):

  bm25                          today's index (`meta.json` + bm25s files), the default
  dense                         `dense/` (rise_batch.index.dense): an embedding model's exact cosine top-k
  hybrid                        both, fused as its entry's default (hybrid:weighted:0.7, chosen below) ...
  hybrid:rrf[:K]                ... or by reciprocal rank (K = 60) ...
  hybrid:weighted[:W]           ... or by a weighted sum of min-max scores (W = the BM25 weight, 0.5)

Why `hybrid` means weighted:0.7: chosen on a dev half of squad_wiki (by query id) among rrf K in 5..120 and
weighted W in 0.4..0.9 (`python -m bench.retrievers`), as the best mean recall@10/100/1000 among those never below
bm25 on dev; on the test half it is above bm25 at every K with passage-level dense (docs/retrieval.md). Equal-weight
fusion (rrf) lets the weaker dense list pull gold down; a BM25-heavy weight keeps BM25's hits and adds dense's.

The spec string is the one key of every config (`retriever:` in run and sweep YAML) and flag (`--retriever`), and
what a run records (`str(spec)` enters its config hash and summary). `index --retriever R` builds the parts R
needs (its `RETRIEVERS` entry); opening a retriever whose part the directory lacks is a one-line error naming the
directory and the command that builds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rise_batch.errors import ConfigError
from rise_batch.index.retriever_kinds import RETRIEVERS as RETRIEVERS  # re-exported
from rise_batch.index.retriever_kinds import default_retriever as default_retriever  # re-exported
from rise_batch.index.retriever_kinds import parts_present as parts_present  # re-exported
from rise_batch.index.retriever_kinds import spec_help
from rise_batch.index.search import local_index


@dataclass(frozen=True)
class RetrieverSpec:
    """A parsed `--retriever`: the registered name and, for a fused retriever, how its lists are fused."""

    name: str = "bm25"
    fusion: str | None = None  # rrf or weighted, for a fused retriever only
    rrf_k: float = 60.0
    weight: float = 0.5  # BM25's share in a weighted fusion

    def __str__(self) -> str:
        if self.fusion is None:
            return self.name
        return f"{self.name}:rrf:{self.rrf_k:g}" if self.fusion == "rrf" else f"{self.name}:weighted:{self.weight:g}"

    def fusion_args(self) -> tuple[str, float, float]:
        """(fusion, rrf_k, weight), as rise_batch.index.hybrid.HybridIndex takes them."""
        return self.fusion or "rrf", self.rrf_k, self.weight


def parse_retriever(text: str | RetrieverSpec | None) -> RetrieverSpec:
    """A registered name, or a fused one's `NAME:rrf[:K]` or `NAME:weighted[:W]` -> a spec (a fused name alone
    means its entry's `default`); a one-line ConfigError otherwise."""
    if isinstance(text, RetrieverSpec):
        return text
    raw = (text or next(iter(RETRIEVERS))).strip()
    name, *rest = raw.split(":")
    if name not in RETRIEVERS or (not RETRIEVERS[name].fused and rest):
        raise ConfigError(f"retriever {raw!r}: expected {spec_help()}")
    kind = RETRIEVERS[name]
    if not kind.fused:
        return RetrieverSpec(name)
    rest = rest or kind.default.split(":")
    fusion, value = rest[0], (rest[1] if len(rest) == 2 else "")
    bad = ConfigError(f"retriever {raw!r}: expected {name}:rrf[:K] with K >= 0 or {name}:weighted[:W] with 0 <= W <= 1")
    if len(rest) > 2 or fusion not in ("rrf", "weighted"):
        raise bad
    try:
        number = float(value) if value else (60.0 if fusion == "rrf" else 0.5)
    except ValueError:
        raise bad from None
    if not (number >= 0 if fusion == "rrf" else 0 <= number <= 1) or number != number or number == float("inf"):
        raise bad
    if fusion == "rrf":
        return RetrieverSpec(name, "rrf", rrf_k=number)
    return RetrieverSpec(name, "weighted", weight=number)


def open_retriever(
    index_dir: str | Path,
    retriever: str | RetrieverSpec | None = None,
    *,
    embedder: str | None = None,
    backend: str = "auto",
    **bm25_kw: Any,
) -> Any:
    """Open `retriever` over `index_dir`; `embedder` (dense, hybrid) must match the recorded model when given. An
    index in object storage is opened from a verified local copy (`local_index`)."""
    index_dir = local_index(index_dir)
    spec = parse_retriever(retriever)
    have = parts_present(index_dir)
    missing = [p for p in RETRIEVERS[spec.name].parts if p not in have]
    if missing:
        raise ConfigError(
            f"{index_dir}: retriever {spec.name} needs the {' and '.join(missing)} part{'s' * (len(missing) > 1)}, "
            f"and this index holds "
            f"{' and '.join(have) or 'nothing'}; build it with `rise-batch index --retriever {spec.name} --out DIR`"
        )
    return RETRIEVERS[spec.name].open(index_dir, spec, embedder=embedder, backend=backend, **bm25_kw)
