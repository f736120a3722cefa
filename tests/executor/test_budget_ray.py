"""--max-cost on real Ray actors: each actor guards a share of what is left; the job stops cleanly and resumes."""

from __future__ import annotations

import pytest

from rise_batch.config import load_structure_config
from rise_batch.fake_llm import FakeLLMServer
from rise_batch.structuring.budget import BudgetExceeded
from rise_batch.structuring.checkpoint import CheckpointStore
from rise_batch.structuring.job import run_structure


def test_max_cost_on_ray_stops_below_the_limit_and_resumes(tmp_path, sample_path, ray_local, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "")
    out = tmp_path / "o"
    with FakeLLMServer() as server:

        def cfg(limit: float):
            return load_structure_config(
                None,
                corpus=str(sample_path),
                out=str(out),
                backend="llm",
                limit=30,
                shard_docs=5,
                workers=2,
                progress=False,
                max_cost_usd=limit,
                llm_base_url=server.base_url,
                llm_concurrency=2,
                llm_rpm=100_000,
                llm_tpm=100_000_000,
            )

        with pytest.raises(BudgetExceeded) as stop:
            run_structure(cfg(0.04))
        assert "--max-cost $0.0400" in str(stop.value)
        rows = CheckpointStore(out).read_rows()
        assert 0 < len(rows) < 30 and sum(r.cost_usd for r in rows) <= 0.04
        done = {r.docid for r in rows}
        keys_before = {e["key"] for e in server.log()}
        mark = len(server.log())
        stats = run_structure(cfg(1.0))
        assert stats["docs_total"] == 30
        assert len(keys_before) == len(done)  # every paid reply was checkpointed before the stop
        assert not {e["key"] for e in server.log(mark)} & keys_before
