"""Storage not every node sees is refused before the first shard or query, in one line naming the node and the path.

On the 2-node cluster, a path under `two_nodes.local` is a node-local disk: the head and node B see two different
directories there. Workers would write where the driver never looks; the probe (rise_batch/executor/probe.py) must
refuse it up front, with exit code 2 and nothing written.
"""

from __future__ import annotations

import os
import re
import shutil

import pytest

from tests.agent.conftest import agent_world, fake_server  # noqa: F401 - fixtures shared with tests/agent
from tests.agent.helpers import run_dir, title_query, write_queries
from tests.conftest import SAMPLE, sample_rows, write_jsonl

pytestmark = pytest.mark.slow

REFUSED = re.compile(r"is not on storage every node sees: node [0-9.]+ \([0-9a-f]{6}\) sees another ")
REMEDY = "use a shared filesystem or an s3:// path"


def refusal(run, path) -> str:
    """The one error line of a refused command (no traceback, the path and the remedy named)."""
    assert run.returncode == 2, run.stdout + run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    lines = [line for line in run.stderr.splitlines() if "error:" in line]
    assert len(lines) == 1, run.stderr
    assert REFUSED.search(lines[0]) and f"sees another {path};" in lines[0] and REMEDY in lines[0], lines[0]
    return lines[0]


def structure_args(out, *extra) -> list:
    return ["structure", "--corpus", SAMPLE, "--out", out, "--limit", "120", "--shard-docs", "20", "--no-progress",
            *extra]  # fmt: skip


@pytest.mark.usefixtures("node_disks")
def test_structure_into_a_node_local_out_is_refused(two_nodes) -> None:
    out = two_nodes.local / "structure-local"
    run = two_nodes.cli(*structure_args(out, "--workers", "2"))
    assert refusal(run, out).startswith("rise-batch structure: error: OUT is not on storage every node sees")
    assert not out.exists()  # nothing written: the probe's files are gone and the empty OUT removed
    assert not (two_nodes.b_disk / "structure-local").exists()


@pytest.mark.usefixtures("node_disks")
def test_a_stale_copy_of_out_on_another_node_is_refused(two_nodes) -> None:
    """Node B holds an earlier copy of OUT's manifest and docmap (a cluster.yaml rsync of the working directory):
    its workers would find a run to resume and write their shards on B's disk while the head reports success."""
    out = two_nodes.local / "structure-stale"
    first = two_nodes.cli(*structure_args(out, "--workers", "0"))  # the run planned on the head, in process
    assert first.returncode == 0, first.stderr
    for name in ("checkpoint", "stats", "corpus", "stats.json"):  # planned, not yet structured
        shutil.rmtree(out / name) if (out / name).is_dir() else (out / name).unlink()
    (out / "checkpoint").mkdir()
    (out / "stats").mkdir()
    stale = two_nodes.b_disk / "structure-stale"
    stale.mkdir()
    for name in ("manifest.json", "docmap.parquet"):
        shutil.copy(out / name, stale / name)
    run = two_nodes.cli(*structure_args(out, "--workers", "2"))
    refusal(run, out)
    assert not list((out / "stats").iterdir()) and not (out / "corpus").exists()
    assert sorted(p.name for p in stale.iterdir()) == ["docmap.parquet", "manifest.json"]  # nothing written on B


@pytest.mark.usefixtures("node_disks")
def test_run_into_a_node_local_run_directory_is_refused(two_nodes, agent_world, fake_server) -> None:  # noqa: F811
    base = run_dir("cluster-run-local")
    rows = [title_query(d, t) for d, t in list(agent_world.titles.items())[:4]]
    queries = write_queries(base / "q.jsonl", rows)
    out = two_nodes.local / "run-local"
    run = two_nodes.cli(
        "run", "--queries", queries, "--docs", agent_world.docs, "--index", agent_world.index, "--out", out,
        "--workers", "2", "--base-url", fake_server.base_url, "--model", "gpt-5.4-mini", "--rpm", "100000",
        "--index-backend", "numpy", "--no-progress",
    )  # fmt: skip
    line = refusal(run, out)
    assert line.startswith("rise-batch run: error: the run directory (--out) is not on storage every node sees")
    assert fake_server.stats()["requests"] == 0  # refused before any model call
    assert not (out / "trajectories").exists()


@pytest.mark.usefixtures("node_disks")
def test_index_on_ray_reads_the_same_corpus_on_every_node(two_nodes, tmp_path) -> None:
    """A per-node copy of the corpus is fine (its mtime differs: the fingerprint ignores it); another corpus at the
    same path on node B is refused before any shard is tokenized."""
    rows = sample_rows(40)
    corpus = two_nodes.local / "corpus.jsonl"
    write_jsonl(corpus, rows)
    copy = write_jsonl(two_nodes.b_disk / "corpus.jsonl", rows)
    os.utime(copy, (1_000_000_000, 1_000_000_000))
    args = ["index", "--corpus", corpus, "--shard-docs", "10", "--no-progress"]
    same = two_nodes.cli(*args, "--out", tmp_path / "index-same")
    assert same.returncode == 0, same.stderr
    write_jsonl(copy, rows[:39])  # node B's copy lost a row
    other = two_nodes.cli(*args, "--out", tmp_path / "index-other")
    assert other.returncode == 2, other.stderr
    line = next(line for line in other.stderr.splitlines() if "error:" in line)
    assert re.search(r"the corpus \(--corpus\) differs between nodes: node [0-9.]+ \([0-9a-f]{6}\) sees another ", line)
    assert f"another {corpus}; copy the same files to every node, or {REMEDY}" in line
    assert not (tmp_path / "index-other").exists()
