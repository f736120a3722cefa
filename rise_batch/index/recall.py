"""Recall@K of gold documents: how often the BM25 boundary of the interaction space contains the evidence.

This is the paper's gold_R for a single sub-query (the question text): the fraction of a query's gold documents
found in its top K, averaged over queries that have gold documents. Queries without gold are counted apart, not
scored as 0 or 1, so they cannot flatter or sink the figure.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Protocol

from rise_batch.index.search import Hits


class Searcher(Protocol):
    def search(self, queries: list[str], k: int) -> list[Hits]: ...


def read_queries(path: str | Path) -> list[dict]:
    """JSONL rows with `query` and `gold_doc_ids`; `query_id` defaults to the line number."""
    rows = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: line {n}: invalid JSON ({e.msg})") from None
            if not isinstance(r.get("query"), str):
                raise ValueError(f"{path}: line {n}: missing string field 'query'")
            gold = r.get("gold_doc_ids", [])
            if not isinstance(gold, list):
                raise ValueError(f"{path}: line {n}: 'gold_doc_ids' must be a list")
            rows.append({"query_id": str(r.get("query_id", n)), "query": r["query"], "gold": [str(g) for g in gold]})
    return rows


def recall_at(ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    """Fraction of distinct gold ids among the first k ranked ids (gold must be non-empty)."""
    g = set(gold)
    return len(g.intersection(ranked[:k])) / len(g)


def evaluate_recall(index: Searcher, queries: list[dict], ks: Sequence[int], batch: int = 64) -> dict:
    """Per-query recall at each k (one search at max(ks)) and their means over queries with gold."""
    ks = sorted(set(ks))
    per_query = []
    scored = [q for q in queries if q["gold"]]
    for i in range(0, len(scored), batch):
        chunk = scored[i : i + batch]
        for q, hits in zip(chunk, index.search([q["query"] for q in chunk], ks[-1]), strict=True):
            per_query.append(
                {
                    "query_id": q["query_id"],
                    "n_hits": len(hits.docids),
                    "recall": {str(k): recall_at(hits.docids, q["gold"], k) for k in ks},
                }
            )
    n = len(per_query)
    summary = {
        "n_queries": n,
        "n_skipped_no_gold": len(queries) - n,
        "recall": {str(k): (sum(p["recall"][str(k)] for p in per_query) / n if n else 0.0) for k in ks},
    }
    return {"summary": summary, "per_query": per_query}
