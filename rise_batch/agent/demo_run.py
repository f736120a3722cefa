"""A few agent trajectories on the bundled sample, played by the fake server's scripted agent: the end of
`rise-batch demo`, so a new user sees a whole trajectory (search, rg, TOC read, answer) without a key.

The model is the in-process fake server, so every token and dollar printed is simulated (priced as if the
model were real); the output says so. Where no sandbox can run, the demo asks for `retrieval-agent`, the one
system without a shell, rather than ever running the agent's bash unsandboxed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rise_batch.agent.job import run_trajectories, summary_line
from rise_batch.agent.run_config import load_run_config

DEMO_QUERIES = [
    {
        "query_id": "demo-01",
        "query": "Which political philosophy advocates 'self-governed societies' based on voluntary institutions?",
        "answer": "Anarchism",
        "gold_doc_ids": ["enwiki-12"],
    },
    {
        "query_id": "demo-02",
        "query": "Which body hosts the annual American awards ceremony nicknamed the 'Oscars'?",
        "answer": "Academy of Motion Picture Arts and Sciences",
        "gold_doc_ids": ["enwiki-324"],
    },
    {
        "query_id": "demo-03",
        "query": "Aruba is a constituent country of which kingdom, located in the 'southern Caribbean Sea'?",
        "answer": "Kingdom of the Netherlands",
        "gold_doc_ids": ["enwiki-690"],
    },
]


def demo_trajectories(docs: str | Path, out: str | Path, base_url: str, system: str = "rise") -> dict[str, Any]:
    """Run DEMO_QUERIES with `system` in this process against the fake server at `base_url` (the caller starts it:
    the fake server sits above the agent in the layers); print a digest."""
    docs, out = Path(docs), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    queries = out / "queries.jsonl"
    queries.write_text("".join(json.dumps(q) + "\n" for q in DEMO_QUERIES), encoding="utf-8")
    cfg = load_run_config(
        None,
        queries=str(queries),
        system=system,
        docs=str(docs),
        index=str(docs / "index"),
        out=str(out / system),
        workers=0,
        concurrency=len(DEMO_QUERIES),
        index_backend="numpy",
        progress=False,
        llm_base_url=base_url,
        llm_model="gpt-5.4-mini",
        llm_tpm=100_000_000,
    )
    stats = run_trajectories(cfg)
    first = json.loads((Path(cfg.out) / "trajectories" / "demo-01.json").read_text())
    print(f"trajectories  : {Path(cfg.out) / 'trajectories'}/<query>.json  (scripted agent, fake server)")
    print(f"  {first['query']}")
    for step in first["steps"]:
        print(f"    {step['tool']:<6} {json.dumps(step['arguments'], ensure_ascii=False)[:100]}")
    print(f"    -> Exact Answer: {first['exact_answer']}   (gold: {first['answer']})")
    print(summary_line(stats, cfg.out))
    print(
        f"simulated     : cost_usd={stats['cost_usd']} is what {cfg.llm.model} would cost for these tokens; the "
        "replies came from a built-in fake model (scripted agent), so no API was called and nothing was billed"
    )
    return stats
