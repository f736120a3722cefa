"""Completeness checks of bench/pipeline_1m.py, read from the outputs after each resume (not from the jobs' own
summaries): every document has exactly one checkpoint row and one structured file, the LLM tier is exactly the
docid list, the index holds every document, every query has a trajectory and a judgment. Each returns a dict with
`complete` so the run's JSON says plainly whether the resumed outputs are whole."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path


def check_structure(out: Path, docs: int, tier: Path) -> dict:
    import pyarrow.parquet as pq

    parts = sorted((out / "checkpoint").glob("shard-*.part-*.parquet"))
    ids: list[str] = []
    tiers: Counter = Counter()
    outcomes: Counter = Counter()
    llm_ids: set[str] = set()
    for p in parts:
        t = pq.read_table(p, columns=["docid", "tier", "outcome"])
        d, tr = t["docid"].to_pylist(), t["tier"].to_pylist()
        ids += d
        tiers.update(tr)
        outcomes.update(t["outcome"].to_pylist())
        llm_ids.update(x for x, y in zip(d, tr, strict=True) if y == "llm")
    unique = len(set(ids))
    wanted_llm = set(tier.read_text().split())
    files = sum(len(f) for _, _, f in os.walk(out / "corpus"))
    docmap = pq.ParquetFile(out / "docmap.parquet").metadata.num_rows
    res = {
        "checkpoint_parts": len(parts),
        "rows": len(ids),
        "unique_docids": unique,
        "duplicate_rows": len(ids) - unique,
        "tiers": dict(tiers),
        "outcomes": dict(outcomes),
        "llm_tier_matches_list": llm_ids == wanted_llm,
        "corpus_files": files,
        "docmap_rows": docmap,
    }
    res["complete"] = unique == docs == files == docmap and len(ids) == unique and llm_ids == wanted_llm
    return res


def check_index(out: Path) -> dict:
    meta = json.loads((out / "index" / "meta.json").read_text())
    docids = json.loads((out / "index" / "docids.json").read_text())
    n = meta.get("counts", {}).get("n_docs")
    return {"n_docs": n, "docids": len(docids), "complete": n == len(docids) == len(set(docids))}


def _ids(queries: Path) -> set[str]:
    return {json.loads(line)["query_id"] for line in queries.open()}


def check_trajectories(run_dir: Path, queries: Path) -> dict:
    want = _ids(queries)
    got: dict[str, dict] = {}
    for p in (run_dir / "trajectories").glob("*.json"):
        rec = json.loads(p.read_text())
        got[rec["query_id"]] = rec
    stops = Counter(r.get("stop_reason") for r in got.values())
    gold_r = [  # gold_R: share of a query's gold documents inside its search union
        len(set(r["gold_doc_ids"]) & set(r["retrieved_docids"])) / len(r["gold_doc_ids"])
        for r in got.values()
        if r.get("gold_doc_ids")
    ]
    elapsed = sorted(r["elapsed_s"] for r in got.values())
    ws = [r["workspace_docs"] for r in got.values() if isinstance(r.get("workspace_docs"), int)]
    return {
        "queries": len(want),
        "trajectories": len(got),
        "missing": sorted(want - set(got))[:20],
        "stop_reasons": dict(stops),
        "gold_r_mean": round(sum(gold_r) / len(gold_r), 3) if gold_r else None,
        "workspace_docs_mean": round(sum(ws) / len(ws), 1) if ws else None,
        "elapsed_s_p50": elapsed[len(elapsed) // 2] if elapsed else None,
        "complete": set(got) == want,
    }


def check_judged(run_dir: Path, queries: Path) -> dict:
    want = _ids(queries)
    got = {}
    for p in (run_dir / "judgments").glob("*.json"):
        rec = json.loads(p.read_text())
        got[rec.get("query_id", p.stem)] = rec
    unjudged = sum(1 for r in got.values() if r.get("unjudged"))
    correct = sum(1 for r in got.values() if r.get("correct") is True)
    return {
        "judgments": len(got),
        "unjudged": unjudged,
        "correct": correct,
        "missing": sorted(want - set(got))[:20],
        "complete": set(got) == want and unjudged == 0,
    }


def tool_latency(events: Path) -> dict:
    """Seconds per tool call as the agent loop timed them (search includes linking the union into the workspace;
    bash includes starting the sandbox), p50/p90/p99 over every call of the run, under the trajectory load."""
    by_tool: dict[str, list[float]] = {}
    with events.open() as fh:
        for line in fh:
            e = json.loads(line)
            if e.get("event") == "tool_call" and isinstance(e.get("seconds"), (int, float)):
                by_tool.setdefault(e["tool"], []).append(e["seconds"])
    out = {}
    for tool, xs in sorted(by_tool.items()):
        xs.sort()
        out[tool] = {"calls": len(xs)} | {
            f"p{p}_ms": round(xs[min(len(xs) - 1, len(xs) * p // 100)] * 1000, 1) for p in (50, 90, 99)
        }
    return out
