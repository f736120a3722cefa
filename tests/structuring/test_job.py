"""The structure job end to end on real files: outputs, resume, refusal of mismatched runs, bad rows."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from rise_batch.config import ConfigError, load_structure_config
from rise_batch.structure.render import strip_structure
from rise_batch.structuring.checkpoint import CheckpointStore
from rise_batch.structuring.job import run_structure
from tests.conftest import sample_rows, write_jsonl

STATS_KEYS = {
    "docs_total",
    "docs_with_toc",
    "outcomes",
    "anchors_proposed",
    "anchors_located",
    "anchors_exact",
    "anchors_normalized",
    "anchors_prefix",
    "llm_calls",
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "cost_usd",
    "wall_seconds",
    "docs_per_second",
}


def checkpoint_table(out) -> list[dict]:
    rows = [r._asdict() for r in CheckpointStore(out).read_rows()]
    return sorted(rows, key=lambda r: r["docid"])


def test_heuristic_job_writes_every_output(tmp_path, sample_path):
    out = tmp_path / "out"
    cfg = load_structure_config(None, corpus=str(sample_path), out=str(out), shard_docs=30, progress=False)
    stats = run_structure(cfg)
    assert STATS_KEYS <= set(stats)
    assert stats["docs_total"] == 100 and stats["shards"] == 4
    assert sum(stats["outcomes"].values()) == 100
    assert stats["docs_with_toc"] >= 90
    assert json.loads((out / "stats.json").read_text())["docs_total"] == 100
    docmap = pq.read_table(out / "docmap.parquet").to_pylist()
    assert len(docmap) == 100
    originals = {r["docid"]: r["text"] for r in sample_rows()}
    for entry in docmap:
        text = (out / "corpus" / entry["relpath"]).read_text(encoding="utf-8")
        assert strip_structure(text) == originals[entry["docid"]]
    rows = checkpoint_table(out)
    assert [r["docid"] for r in rows] == sorted(originals)
    assert all(r["tier"] == "heuristic" and r["content_hash"] for r in rows)


def test_rerun_resumes_without_redoing_and_mismatch_is_refused(tmp_path, sample_path):
    out = tmp_path / "out"
    cfg = load_structure_config(None, corpus=str(sample_path), out=str(out), shard_docs=40, limit=60, progress=False)
    run_structure(cfg)
    parts = sorted(p.name for p in (out / "checkpoint").iterdir())
    first = checkpoint_table(out)
    stats = run_structure(cfg)
    assert sorted(p.name for p in (out / "checkpoint").iterdir()) == parts  # nothing re-written
    assert stats["docs_total"] == 60 and stats.get("resumed_done") == 2
    assert checkpoint_table(out) == first
    other = load_structure_config(None, corpus=str(sample_path), out=str(out), shard_docs=40, limit=70, progress=False)
    with pytest.raises(ConfigError, match="different corpus or shard plan"):
        run_structure(other)
    fresh = load_structure_config(
        None, corpus=str(sample_path), out=str(out), shard_docs=40, limit=70, progress=False, new_run=True
    )
    assert run_structure(fresh)["docs_total"] == 70
    assert len(list(out.glob("superseded-*/checkpoint/*.parquet"))) == len(parts)


def test_partial_shard_resumes_from_its_parts(tmp_path, sample_path):
    """A shard killed after some parts were written redoes only the rest (simulated by deleting the done marker
    and the later parts of a finished run, which is exactly the state a kill leaves)."""
    out = tmp_path / "out"
    cfg = load_structure_config(
        None, corpus=str(sample_path), out=str(out), shard_docs=50, flush_docs=10, limit=50, progress=False
    )
    run_structure(cfg)
    whole = checkpoint_table(out)
    store = CheckpointStore(out)
    parts = store.parts(0)
    assert len(parts) == 5
    for p in parts[2:]:
        p.unlink()
    store.stats_path(0).unlink()
    stats = run_structure(cfg)
    assert stats["resumed_docs"] == 20
    assert checkpoint_table(out) == whole


def test_bad_rows_are_recorded_not_lost(tmp_path):
    rows = sample_rows(5) + [{"docid": "enwiki-12", "text": "dup"}, {"docid": "x", "text": None}]
    corpus = write_jsonl(tmp_path / "c.jsonl", rows)
    with pytest.raises(Exception, match=r"c\.jsonl: row 5: duplicate docid"):
        run_structure(load_structure_config(None, corpus=str(corpus), out=str(tmp_path / "a"), progress=False))
    out = tmp_path / "b"
    stats = run_structure(
        load_structure_config(None, corpus=str(corpus), out=str(out), on_bad_row="skip", progress=False)
    )
    assert stats["docs_total"] == 5 and stats["bad_rows"] == 2 and stats["outcomes"]["skipped"] == 2
    bad = pq.read_table(out / "bad_rows.parquet").to_pylist()
    assert [(b["row"], b["reason"].split(" (")[0]) for b in bad] == [(5, "duplicate docid"), (6, "null text")]


def test_cli_summary_line(tmp_path, sample_path, capsys):
    from rise_batch.cli import main

    out = tmp_path / "o"
    assert main(["structure", "--corpus", str(sample_path), "--out", str(out), "--limit", "5"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("structure docs_total=5 ") and f"out={out}" in line
    assert main(["structure", "--corpus", str(tmp_path / "missing"), "--out", str(out)]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_in_process_llm_shards_overlap_so_requests_never_drain_at_a_shard_boundary(tmp_path, sample_path):
    """One lane per shard made every boundary a stall: the last replies of a shard trickled in, then its files
    were written, then the next shard read its rows, with no request out. In process the LLM backend runs two
    shards at once (the client still holds the worker to llm.concurrency requests in flight), so the next shard's
    requests are already out while the previous one drains; outputs are those of a one-lane run."""
    from rise_batch.fake_llm import FakeLLMServer

    out = tmp_path / "out"
    with FakeLLMServer(latency_ms=20) as server:
        cfg = load_structure_config(
            None, corpus=str(sample_path), out=str(out), backend="llm", shard_docs=30, limit=60, workers=0,
            progress=False, llm_base_url=server.base_url, llm_concurrency=4,
        )  # fmt: skip
        stats = run_structure(cfg)
        log = server.log()
    assert stats["docs_total"] == 60 and stats["shards"] == 2
    shard_of = {r["docid"]: r["shard"] for r in pq.read_table(out / "docmap.parquet").to_pylist()}
    docid_of = {r["text"][:60]: r["docid"] for r in sample_rows()}
    arrivals: dict[int, list[float]] = {0: [], 1: []}
    for entry in log:
        arrivals[shard_of[docid_of[entry["head"]]]].append(entry["t"])
    assert len(arrivals[0]) >= 25 and len(arrivals[1]) >= 25  # a few sample articles are too short to send
    assert min(arrivals[1]) < max(arrivals[0])  # shard 1 was under way before shard 0's last request
    assert checkpoint_table(out) and all(r["tier"] == "llm" for r in checkpoint_table(out))
