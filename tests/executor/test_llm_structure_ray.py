"""LLM structuring on real Ray actors against the fake server with faults, under one cluster-wide limiter."""

from __future__ import annotations

import bisect

from rise_batch.config import load_structure_config
from rise_batch.fake_llm import FakeLLMServer
from rise_batch.structuring.checkpoint import CheckpointStore
from rise_batch.structuring.job import run_structure
from rise_batch.types import OUTCOMES


def max_in_window(times: list[float], window: float) -> int:
    times = sorted(times)
    return max(bisect.bisect_left(times, t + window) - i for i, t in enumerate(times))


def test_faults_retries_and_a_shared_rate_limit(tmp_path, sample_path, ray_local):
    """20% 429s, 5% 500s, 3% hangs; 2 actors x 8 in flight; 20 requests per 2 s window across the whole job."""
    rpm, window = 20, 2.0
    with FakeLLMServer(
        p429=0.2, p500=0.05, p_hang=0.03, hang_s=30, max_faults_per_key=3, latency_ms=5, retry_after_ms=50
    ) as server:
        cfg = load_structure_config(
            None,
            corpus=str(sample_path),
            out=str(tmp_path / "o"),
            backend="llm",
            limit=40,
            shard_docs=10,
            workers=2,
            progress=False,
            llm_base_url=server.base_url,
            llm_rpm=rpm,
            llm_limit_window_s=window,
            llm_timeout_s=1.0,
            llm_max_attempts=6,
            llm_concurrency=8,
        )
        stats = run_structure(cfg)
        log = server.log()
    rows = CheckpointStore(tmp_path / "o").read_rows()
    assert sorted(r.docid for r in rows) == sorted({r.docid for r in rows}) and len(rows) == 40
    assert all(r.outcome in OUTCOMES for r in rows)
    assert stats["docs_total"] == 40 and sum(stats["outcomes"].values()) == 40
    faults = [e for e in log if e.get("fault")]
    assert faults, "the fault mix produced no fault"
    t = stats["transport"]
    # a request still hanging when the log is read is not in it yet, hence >=
    assert t["attempts"] >= len(log) and t["retries"] > 0 and t["rate_limited"] > 0
    assert t["retries"] == t["attempts"] - t["calls"]
    # the limit is per whole job: both actors together stay under it (margin for grant->arrival delay)
    assert max_in_window([e["t"] for e in log], window - 0.25) <= rpm
    assert stats["llm_calls"] >= 40
