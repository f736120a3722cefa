"""Whole trajectories over `POST /v1/responses` against the fake server."""

from __future__ import annotations

import pytest

from rise_batch.agent.job import run_trajectories
from tests.agent.helpers import read_trajectories, run_config, run_dir, title_query, write_queries


@pytest.mark.parametrize("http_backend", ["direct", "httpx"])
def test_trajectories_over_the_responses_api(agent_world, fake_server, http_backend):
    out = run_dir(f"responses-{http_backend}")
    items = list(agent_world.titles.items())[:3]
    queries = write_queries(out / "q.jsonl", [title_query(d, t) for d, t in items])
    cfg = run_config(
        out / "run",
        queries,
        fake_server.base_url,
        api="responses",
        llm_reasoning_effort="low",
        llm_http_backend=http_backend,
    )
    stats = run_trajectories(cfg)
    assert stats["stop_reasons"] == {"answered": 3}
    for qid, t in read_trajectories(out / "run").items():
        assert qid in t["surfaced_docids"] and t["exact_answer"] and t["usage"]["output_tokens"] > 0
    paths = {e["path"] for e in fake_server.log()}
    assert paths == {"/v1/responses"}
