"""Hybrid retrieval: fuse a BM25 ranking and a dense ranking of the same index directory into one.

Two fusions, chosen by the retriever spec (`hybrid` = `hybrid:weighted:0.7`, `hybrid:rrf:60`, ...):
- `rrf`: reciprocal-rank fusion, score(d) = sum over lists of 1 / (rrf_k + rank(d)), rank from 1;
  rank-only, so it needs no score calibration between BM25 (unbounded) and cosine (-1..1). rrf_k = 60 (Cormack
  et al. 2009).
- `weighted` (what `hybrid` means, w = 0.7; rise_batch.index.retriever says why): w * minmax(bm25) + (1 - w) *
  minmax(cosine), each list min-max normalised per query over its own candidates; a document missing from a list
  gets 0 from it.
Each list is taken to `depth` = max(k, min_depth) (1000 by default), so a document ranked 900th by one retriever
and 5th by the other can still reach the fused top 10. Ties break by docid, so the order is deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence

from rise_batch.index.search import Hits, clamp_k

FUSIONS = ("rrf", "weighted")


def rrf(lists: Sequence[Hits], rrf_k: float = 60.0) -> dict[str, float]:
    """Reciprocal-rank fusion scores of every document in any list."""
    scores: dict[str, float] = {}
    for hits in lists:
        for rank, d in enumerate(hits.docids, start=1):
            scores[d] = scores.get(d, 0.0) + 1.0 / (rrf_k + rank)
    return scores


def weighted(lists: Sequence[Hits], weights: Sequence[float]) -> dict[str, float]:
    """Weighted sum of per-query min-max normalised scores (a list whose scores are all equal counts 1 each)."""
    scores: dict[str, float] = {}
    for hits, w in zip(lists, weights, strict=True):
        if not hits.docids:
            continue
        lo, hi = min(hits.scores), max(hits.scores)
        for d, s in zip(hits.docids, hits.scores, strict=True):
            norm = (s - lo) / (hi - lo) if hi > lo else 1.0
            scores[d] = scores.get(d, 0.0) + w * norm
    return scores


def top(scores: dict[str, float], k: int) -> Hits:
    """The k best of fused scores, best first, ties by docid."""
    ranked = sorted(scores.items(), key=lambda x: (-x[1], x[0]))[:k]
    return Hits([d for d, _ in ranked], [s for _, s in ranked])


class HybridIndex:
    """`search(queries, k)` over a BM25 and a dense retriever of the same documents, fused per query."""

    name = "hybrid"

    def __init__(
        self, bm25, dense, fusion: str = "rrf", rrf_k: float = 60.0, weight: float = 0.5, min_depth: int = 1000
    ) -> None:
        if fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {FUSIONS}, got {fusion!r}")
        if bm25.docids != dense.docids:
            raise ValueError(
                f"{dense.path}: the BM25 and dense parts hold different documents; rebuild with --retriever hybrid"
            )
        self.bm25, self.dense = bm25, dense
        self.fusion, self.rrf_k, self.weight, self.min_depth = fusion, float(rrf_k), float(weight), int(min_depth)
        self.docids = bm25.docids
        self.path = bm25.path

    def __len__(self) -> int:
        return len(self.docids)

    def search(self, queries: list[str], k: int) -> list[Hits]:
        k = clamp_k(queries, k, len(self.docids))
        if k <= 0:
            return [Hits([], []) for _ in queries]
        depth = max(k, self.min_depth)
        lexical, semantic = self.bm25.search(queries, depth), self.dense.search(queries, depth)
        out = []
        for a, b in zip(lexical, semantic, strict=True):
            if self.fusion == "rrf":
                out.append(top(rrf([a, b], self.rrf_k), k))
            else:
                out.append(top(weighted([a, b], [self.weight, 1.0 - self.weight]), k))
        return out
