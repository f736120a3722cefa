"""Recall@K of gold documents: how often the BM25 boundary of the interaction space contains the evidence.

This is the paper's gold_R for a single sub-query (the question text): the fraction of a query's gold documents
found in its top K, averaged over queries that have gold documents. Queries without gold are counted apart, not
scored as 0 or 1, so they cannot flatter or sink the figure (and a file where no query has gold is refused by the
command, not scored 0). Query files are read by `rise_batch.queries` (`read_queries(path, ids_optional=True)`,
then `select_gold` for gold, evidence or qrels), the same reader and choice as the agent's and the report's.
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


def search_all(index: Searcher, queries: list[Query], k: int, batch: int = 64) -> list[Hits]:
    """The top k of every query, in query order (the text is the single sub-query), `batch` queries per call."""
    hits: list[Hits] = []
    for i in range(0, len(queries), batch):
        chunk = queries[i : i + batch]
        hits += index.search([q.query for q in chunk], k)
    return hits


def score_recall(queries: list[Query], hits: Sequence[Hits], ks: Sequence[int]) -> dict:
    """Per-query recall at each k and their means over queries with gold (None when no query has gold)."""
    ks = sorted(set(ks))
    per_query = [
        {
            "query_id": q.query_id,
            "n_hits": len(h.docids),
            "recall": {str(k): recall_at(h.docids, q.gold_doc_ids, k) for k in ks},
        }
        for q, h in zip(queries, hits, strict=True)
        if q.gold_doc_ids
    ]
    n = len(per_query)
    summary = {
        "n_queries": n,
        "n_skipped_no_gold": len(queries) - n,
        "recall": {str(k): (sum(p["recall"][str(k)] for p in per_query) / n if n else None) for k in ks},
    }
    return {"summary": summary, "per_query": per_query}


def evaluate_recall(index: Searcher, queries: list[Query], ks: Sequence[int], batch: int = 64) -> dict:
    """Per-query recall at each k (one search at max(ks), queries with gold only) and their means."""
    scored = [q for q in queries if q.gold_doc_ids]
    result = score_recall(scored, search_all(index, scored, max(ks), batch), ks)
    result["summary"]["n_skipped_no_gold"] = len(queries) - len(scored)
    return result
