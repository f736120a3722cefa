"""The driver checks what the workers say they wrote, on its own view of the storage, and never exits 0 with less.

On the 2-node cluster with shared storage: a structured file or a trajectory file that is gone when the driver
looks is redone (the structure job from its checkpoint, paying nothing; a trajectory by running its query again),
and the stats say which node ran each shard or query. `rise-bm25` with the docs copied to each node derives the
original-text twin on each node where a worker runs.
"""

from __future__ import annotations

import json
import re
import shutil
import threading
from pathlib import Path

import pytest

from tests.agent.conftest import agent_world, fake_server  # noqa: F401 - fixtures shared with tests/agent
from tests.agent.helpers import read_trajectories, run_dir, title_query, write_queries
from tests.conftest import SAMPLE

pytestmark = pytest.mark.slow


def run_args(queries, docs, index, out, base_url, system: str = "rise") -> list:
    """A `run` on both nodes: each actor asks for 2 CPUs (the config file), so with 2 CPUs per node Ray must place
    one on each."""
    config = Path(out).parent / f"{Path(out).name}.yaml"
    config.write_text("worker_cpus: 2\n")
    return ["run", "--config", config, "--system", system, "--queries", queries, "--docs", docs, "--index", index,
            "--out", out, "--workers", "2", "--concurrency", "4", "--base-url", base_url, "--model", "gpt-5.4-mini",
            "--rpm", "100000", "--index-backend", "numpy", "--no-progress", "--json"]  # fmt: skip


def test_structure_redoes_a_shard_whose_structured_file_is_gone(two_nodes) -> None:
    out = run_dir("cluster-structure-shared") / "out"
    args = ["structure", "--corpus", SAMPLE, "--out", out, "--limit", "120", "--shard-docs", "20", "--workers", "2",
            "--no-progress", "--json"]  # fmt: skip
    first = two_nodes.cli(*args)
    assert first.returncode == 0, first.stderr
    stats = json.loads(first.stdout[first.stdout.index("{") :])
    victim = next((out / "corpus").rglob("*.txt"))
    text = victim.read_bytes()
    victim.unlink()
    again = two_nodes.cli(*args)
    assert again.returncode == 0, again.stderr
    assert f"{victim}: missing: 1 of the shard's " in again.stderr
    assert victim.read_bytes() == text  # finished again from its checkpoint
    redone = json.loads(again.stdout[again.stdout.index("{") :])
    assert redone["docs_total"] == stats["docs_total"] and redone["docs_this_run"] == 0
    assert redone["rebought_replies"] == 0
    nodes = stats["nodes"]  # which node ran each shard, named as in errors: "IP (id start)"
    assert sum(nodes.values()) == stats["shards"] and all(re.fullmatch(r"[0-9.]+ \([0-9a-f]{6}\)", k) for k in nodes)
    assert len(list((out / "corpus").rglob("*.txt"))) == stats["docs_total"]


class Vanisher(threading.Thread):
    """Deletes a trajectory file once, as soon as it appears: what the driver sees when a worker's write went
    somewhere else (the file a worker reported written is not there)."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path, self.done, self.stop = path, threading.Event(), threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.01):
            if self.path.exists():
                self.path.unlink()
                self.done.set()
                return


def test_run_reruns_a_query_whose_trajectory_file_is_gone(two_nodes, agent_world, fake_server) -> None:  # noqa: F811
    base = run_dir("cluster-run-vanish")
    (fast_id, fast_title), (slow_id, slow_title) = list(agent_world.titles.items())[:2]
    # the slow query is still running when the fast one's file vanishes: the driver's check comes after both
    rows = [title_query(fast_id, fast_title), title_query(slow_id, slow_title, "[fake:tool-sleep=10]")]
    queries = write_queries(base / "q.jsonl", rows)
    out = base / "run"
    vanisher = Vanisher(out / "trajectories" / f"{fast_id}.json")
    vanisher.start()
    try:
        run = two_nodes.cli(*run_args(queries, agent_world.docs, agent_world.index, out, fake_server.base_url))
    finally:
        vanisher.stop.set()
    assert vanisher.done.is_set()
    assert run.returncode == 0, run.stderr
    got = read_trajectories(out)
    assert {q: t["stop_reason"] for q, t in got.items()} == {fast_id: "answered", slow_id: "answered"}
    assert f"1 trajectory the workers reported written is not in {out}/trajectories (first: {fast_id})" in run.stderr
    stats = json.loads(run.stdout)
    assert stats["missing"] == 0 and stats["trajectories"] == 2
    assert sum(stats["nodes"].values()) == 2  # which node ran each query (the fast one: its second run)


@pytest.mark.usefixtures("node_disks")
def test_rise_bm25_with_the_docs_copied_to_each_node(two_nodes, agent_world, fake_server) -> None:  # noqa: F811
    """Each node holds its own copy of DOCS at the same path (no original/ twin in it): the workers on node B
    derive their node's twin, as the driver derives the head's."""
    docs = two_nodes.local / "docs"
    for copy in (docs, two_nodes.b_disk / "docs"):
        shutil.copytree(agent_world.docs, copy, ignore=shutil.ignore_patterns("original", ".original*"))
    base = run_dir("cluster-run-bm25")
    # slow tools keep the first ready worker busy, so the other one gets queries too (not asserted: Ray's timing)
    items = list(agent_world.titles.items())
    rows = [title_query(d, t, "[fake:tool-sleep=2]") for d, t in items[:3]] + [title_query(d, t) for d, t in items[3:6]]
    queries = write_queries(base / "q.jsonl", rows)
    out = base / "run"
    run = two_nodes.cli(*run_args(queries, docs, docs / "index", out, fake_server.base_url, "rise-bm25"))
    assert run.returncode == 0, run.stderr
    for twin in (docs / "original", two_nodes.b_disk / "docs" / "original"):  # the worker on B built B's twin
        assert (twin / ".complete").is_file()
        assert not list(twin.parent.glob(".original.tmp-*"))
    stats = json.loads(run.stdout)
    assert stats["stop_reasons"] == {"answered": 6}, stats
    assert sum(stats["nodes"].values()) == 6, stats
    reads = [s["output"] for t in read_trajectories(out).values() for s in t["steps"] if s["tool"] == "read"]
    assert reads and all("## Table of Contents" not in r for r in reads)  # the agents read originals
