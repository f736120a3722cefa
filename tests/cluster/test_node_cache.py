"""Node-local caches on the real 2-node cluster: a run whose docs and index are on the S3 server, with its
`--cache-dir` on each node's own disk (`two_nodes.local`: the head and node B see different directories there).

Each node's worker makes its own copy of the docs tree and the index, and every query is answered; node B's copy is
on B's disk. A copy cut short on B (its staging directory left by a kill, no marker) is never used: B makes it
again while the head reuses its own (nothing fetched), and the original-text twin of rise-bm25 is derived inside
each node's cached docs, which hold the checkpoint it is checked against (the agents read no table of contents).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rise_batch.cache import MARKER
from rise_batch.storage import location
from tests.agent.helpers import N_DOCS, run_dir, title_query, world, write_queries
from tests.conftest import SAMPLE
from tests.real_parts import require_bwrap

pytestmark = pytest.mark.slow


def entries(cache: Path, kind: str) -> list[Path]:
    """The finished and unfinished entries of one kind under a node's cache (lock files aside: build and use)."""
    return sorted(p for p in (cache / kind).iterdir() if not p.name.endswith((".lock", ".use")))


def run(two_nodes, tmp: Path, system: str, docs: str, index: str, out: str, server_url: str, env: dict) -> dict:
    """`run --workers 2` on both nodes (each actor asks for 2 CPUs: one per node); returns its stats. Each query's
    agent first sleeps 3 s in bash, so the worker ready first cannot answer all six before the other is ready (a
    worker still starting when the last query ends is stopped without a report)."""
    config = tmp / f"{system}.yaml"
    config.write_text("worker_cpus: 2\n")
    w = world()
    rows = [title_query(d, t, "[fake:tool-sleep=3]") for d, t in list(w.titles.items())[:6]]
    queries = write_queries(tmp / "q.jsonl", rows)
    r = two_nodes.cli("run", "--config", config, "--system", system, "--queries", queries, "--docs", docs,
                      "--index", index, "--out", out, "--workers", 2, "--concurrency", 4, "--cache-dir",
                      two_nodes.local / "cache", "--base-url", server_url, "--model", "gpt-5.4-mini", "--rpm",
                      100000, "--index-backend", "numpy", "--no-progress", "--json", env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stderr.count("rise-batch run: cache on ") == 2, r.stdout[-3000:] + r.stderr[-5000:]  # one per node
    return json.loads(r.stdout.splitlines()[-1])


@pytest.mark.usefixtures("node_disks")
def test_each_node_caches_its_own_copy_and_reuses_it(s3, two_nodes, tmp_path):
    from rise_batch.cli import main
    from rise_batch.fake_llm import FakeLLMServer
    from rise_batch.fake_llm.agent import AgentResponder
    from rise_batch.fake_llm.chat import FallbackResponder

    require_bwrap()
    root = location(s3.uri())
    auth = f"{s3.env['AWS_ACCESS_KEY_ID']}:{s3.env['AWS_SECRET_ACCESS_KEY']}"
    opts = f"?endpoint_override={s3.endpoint.removeprefix('http://')}&scheme=http"
    keyed = str(root).replace("s3://", f"s3://{auth}@")
    docs, index = f"{keyed}/docs{opts}", f"{keyed}/docs/index{opts}"
    assert main(["structure", "--corpus", str(SAMPLE), "--out", docs, "--limit", str(N_DOCS), "--index",
                 "--no-progress"]) == 0  # fmt: skip
    env = {k: v for k, v in two_nodes.env.items() if not k.startswith("AWS_")} | {"OPENAI_API_KEY": "x"}
    head, b = two_nodes.local / "cache", two_nodes.b_disk / "cache"  # the same path, seen by each node
    tmp = run_dir("cluster-node-cache")
    with FakeLLMServer(responders=[AgentResponder(), FallbackResponder()]) as server:
        first = run(two_nodes, tmp, "rise", docs, index, f"{keyed}/run1{opts}", server.base_url, env)
        assert first["stop_reasons"] == {"answered": 6}, first
        assert len(first["cache"]) == 2, first  # both nodes made their own copy
        assert first["sources_checked_s"] > 0  # the driver's check of the OUT, apart from the nodes' figures
        for node in first["cache"].values():
            assert not node["reused"] and node["first_trajectory_s"] is not None
            assert node["inputs"]["docs"]["bytes"] > 0 and node["inputs"]["index"]["bytes"] > 0
        for cache in (head, b):
            for kind in ("docs", "index"):
                [entry] = entries(cache, kind)
                assert (entry / MARKER).is_file()
        assert len(list((b / "docs").glob("*/corpus/**/*.txt"))) == N_DOCS  # B's tree is on B's disk

        # B's docs copy cut short by a kill: left in its staging directory, without the marker written last
        [entry] = entries(b, "docs")
        staging = entry.parent / f".{entry.name}.staging-99999"
        entry.rename(staging)
        (staging / MARKER).unlink()
        second = run(two_nodes, tmp, "rise-bm25", docs, index, f"{keyed}/run2{opts}", server.base_url, env)
    assert second["stop_reasons"] == {"answered": 6}, second
    nodes = list(second["cache"].values())
    [rebuilt] = [n for n in nodes if not n["inputs"]["docs"]["reused"]]  # B made its docs again ...
    [kept] = [n for n in nodes if n["inputs"]["docs"]["reused"]]  # ... the head fetched nothing
    assert kept["bytes"] == 0 and kept["inputs"]["index"]["reused"], second
    assert rebuilt["inputs"]["docs"]["bytes"] > 0, second
    assert rebuilt["inputs"]["index"]["bytes"] == 0 and rebuilt["inputs"]["index"]["reused"], second
    assert all(not n["inputs"]["original"]["reused"] for n in nodes), second  # each node derived its twin
    assert not staging.exists() and entries(b, "docs") == [entry] and (entry / MARKER).is_file()
    for cache in (head, b):  # rise-bm25's originals, derived inside each node's cached docs
        [docs_entry] = entries(cache, "docs")
        assert (docs_entry / "original" / ".complete").is_file()
    trajectories = [json.loads(p.read_text()) for p in (root / "run2" / "trajectories").glob("*.json")]
    reads = [s["output"] for t in trajectories for s in t["steps"] if s["tool"] == "read"]
    assert reads and all("## Table of Contents" not in r for r in reads)  # the agents read originals
