"""Recall@K of gold documents: how often the BM25 boundary of the interaction space contains the evidence.

This is the paper's gold_R for a single sub-query (the question text): the fraction of a query's gold documents
found in its top K, averaged over queries that have gold documents. Queries without gold are counted apart, not
scored as 0 or 1, so they cannot flatter or sink the figure. Query files are read by `rise_batch.queries`
(`read_queries(path, ids_optional=True)`), the same reader as the agent's and the judge's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from rise_batch.index.search import Hits
from rise_batch.queries import Query


class Searcher(Protocol):
    def search(self, queries: list[str], k: int) -> list[Hits]: ...


def recall_at(ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    """Fraction of distinct gold ids among the first k ranked ids (gold must be non-empty)."""
    g = set(gold)
    return len(g.intersection(ranked[:k])) / len(g)


def evaluate_recall(index: Searcher, queries: list[Query], ks: Sequence[int], batch: int = 64) -> dict:
    """Per-query recall at each k (one search at max(ks)) and their means over queries with gold."""
    ks = sorted(set(ks))
    per_query = []
    scored = [q for q in queries if q.gold_doc_ids]
    for i in range(0, len(scored), batch):
        chunk = scored[i : i + batch]
        for q, hits in zip(chunk, index.search([q.query for q in chunk], ks[-1]), strict=True):
            per_query.append(
                {
                    "query_id": q.query_id,
                    "n_hits": len(hits.docids),
                    "recall": {str(k): recall_at(hits.docids, q.gold_doc_ids, k) for k in ks},
                }
            )
    n = len(per_query)
    summary = {
        "n_queries": n,
        "n_skipped_no_gold": len(queries) - n,
        "recall": {str(k): (sum(p["recall"][str(k)] for p in per_query) / n if n else 0.0) for k in ks},
    }
    return {"summary": summary, "per_query": per_query}
