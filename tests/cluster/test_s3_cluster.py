"""Everything in object storage on the real 2-node cluster: corpus, structure's OUT and index, the run's docs, index
and run directory all on the S3 server, the keys only in the URIs (they reach the actors on both nodes with their
configs, in memory). The results equal an in-process run's."""

from __future__ import annotations

import json

import pytest

from tests.agent.helpers import N_DOCS, run_dir, title_query, write_queries
from tests.cluster.helpers import keyed_bucket
from tests.conftest import SAMPLE
from tests.real_parts import require_bwrap
from tests.structuring.test_s3 import rows_of

pytestmark = pytest.mark.slow


def jsons(root) -> dict:
    drop = {"elapsed", "elapsed_s", "seconds", "wall_seconds", "created", "started", "finished", "t", "timing"}

    def strip(o):
        if isinstance(o, dict):
            return {
                k: strip(v) for k, v in o.items() if k not in drop and k != "cached_input_tokens" and "usd" not in k
            }
        return [strip(v) for v in o] if isinstance(o, list) else o

    return {p.name: strip(json.loads(p.read_text())) for p in root.glob("*.json")}


def test_pipeline_on_s3_over_two_nodes(s3, two_nodes, tmp_path):
    from rise_batch.fake_llm import FakeLLMServer
    from rise_batch.fake_llm.agent import AgentResponder
    from rise_batch.fake_llm.chat import FallbackResponder

    require_bwrap()
    root, keyed, opts, env = keyed_bucket(s3, two_nodes, "cluster-cache")
    corpus, docs = f"{keyed}/corpus.jsonl.gz{opts}", f"{keyed}/docs{opts}"
    r = two_nodes.cli("structure", "--corpus", corpus, "--out", docs, "--limit", N_DOCS, "--shard-docs", 5,
                      "--workers", 2, "--index", "--no-progress", env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"out={root}/docs" in r.stdout and s3.env["AWS_SECRET_ACCESS_KEY"] not in r.stdout + r.stderr
    from rise_batch.cli import main

    ref = tmp_path / "ref"
    assert main(["structure", "--corpus", str(SAMPLE), "--out", str(ref), "--limit", str(N_DOCS),
                 "--shard-docs", "5", "--no-progress"]) == 0  # fmt: skip
    assert rows_of(root / "docs") == rows_of(ref)
    from tests.agent.helpers import world

    w = world()
    queries = write_queries(tmp_path / "q.jsonl", [title_query(d, t) for d, t in list(w.titles.items())[:4]])
    with FakeLLMServer(responders=[AgentResponder(), FallbackResponder()]) as server:
        common = ["--queries", queries, "--system", "rise", "--index-backend", "numpy", "--no-progress", "--base-url",
                  server.base_url, "--model", "gpt-5.4-mini", "--rpm", "1000000", "--tpm", "10000000000"]  # fmt: skip
        posix = run_dir("cluster-ref-run")
        assert main(["run", *map(str, common), "--docs", str(w.docs), "--index", str(w.index), "--out", str(posix),
                     "--workers", "0"]) == 0  # fmt: skip
        r = two_nodes.cli("run", *common, "--docs", f"{keyed}/docs{opts}", "--index", f"{keyed}/docs/index{opts}",
                          "--out", f"{keyed}/run{opts}", "--workers", 2, env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert jsons(root / "run" / "trajectories") == jsons(posix / "trajectories")
    assert len(jsons(posix / "trajectories")) == 4
