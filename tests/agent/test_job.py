"""Whole runs in process (workers=0): all four systems end to end, the run directory format, resume, refusal of a
changed configuration, and workspaces of concurrent trajectories that never see each other's files."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import psutil
import pytest

from rise_batch.agent.job import run_trajectories
from rise_batch.agent.systems import SYSTEMS
from rise_batch.agent.workspace_root import MARKER
from rise_batch.cli import main
from rise_batch.config import ConfigError
from rise_batch.prompts import load_prompt, prompt_hash
from rise_batch.space.docstore import DocStore
from rise_batch.space.manifest import read_manifest
from rise_batch.space.session import BOOT
from tests.agent.helpers import N_DOCS, read_trajectories, run_config, run_dir, title_query, write_queries
from tests.conftest import sample_rows

TRAJECTORY_KEYS = {
    "query_id", "query", "system", "model", "config_hash", "final_text", "exact_answer", "confidence",
    "stop_reason", "model_calls", "tool_calls", "usage", "cost_usd", "elapsed_s", "workspace_docs",
    "retrieved_docids", "surfaced_docids", "gold_doc_ids", "answer", "steps", "calls", "error",
}  # fmt: skip


def _queries(agent_world, out: Path, n: int, start: int = 0) -> Path:
    items = list(agent_world.titles.items())[start : start + n]
    return write_queries(out / "q.jsonl", [title_query(d, t) for d, t in items])


@pytest.mark.parametrize("system", list(SYSTEMS))
def test_every_system_end_to_end(agent_world, fake_server, system):
    out = run_dir(f"sys-{system}")
    queries = _queries(agent_world, out, 3)
    stats = run_trajectories(run_config(out / "run", queries, fake_server.base_url, system=system))
    assert stats["stop_reasons"] == {"answered": 3} and stats["missing"] == 0
    meta = json.loads((out / "run" / "run.json").read_text())
    assert {"system", "model", "config", "config_hash", "queries", "k", "created"} <= set(meta)
    assert meta["system"] == system and meta["config"]["llm"]["model"] == "gpt-5.4-mini"
    assert meta["prompt"] == SYSTEMS[system].prompt and meta["prompt_hash"] == prompt_hash(load_prompt(meta["prompt"]))
    for qid, t in read_trajectories(out / "run").items():
        assert TRAJECTORY_KEYS <= set(t), TRAJECTORY_KEYS - set(t)
        assert t["system"] == system and t["config_hash"] == meta["config_hash"]
        assert t["gold_doc_ids"] == [qid] and qid in t["surfaced_docids"], "the agent never saw the gold doc"
        assert t["exact_answer"] and t["usage"]["input_tokens"] > 0 and t["cost_usd"] > 0
        if SYSTEMS[system].uses_index:
            assert qid in t["retrieved_docids"]
        assert t["workspace_docs"] >= 1
    events = [json.loads(line) for line in (out / "run" / "events.jsonl").read_text().splitlines()]
    assert {e["event"] for e in events} >= {"start", "model_call", "tool_call", "end"}


def test_a_new_system_is_one_registry_line(agent_world, fake_server, monkeypatch):
    """A system with an existing tool kind needs only its SYSTEMS entry (and a prompt file): config validation,
    budgets, the run, sweeps and the report's label all follow the registry."""
    from rise_batch.agent.systems import STRUCTURED, System
    from rise_batch.eval.plots import system_name
    from rise_batch.eval.sweep import expand, parse_sweep

    monkeypatch.setitem(
        SYSTEMS,
        "rise-lean",
        System(
            name="rise-lean",
            label="RISE lean",
            prompt="agent_rise",
            docs=STRUCTURED,
            tools="rise",
            help="x",
            max_calls=9,
        ),
    )
    out = run_dir("sys-new")
    cfg = run_config(out / "run", _queries(agent_world, out, 2), fake_server.base_url, system="rise-lean")
    assert cfg.budget().max_calls == 9
    stats = run_trajectories(cfg)
    assert stats["stop_reasons"] == {"answered": 2} and stats["missing"] == 0
    assert {t["system"] for t in read_trajectories(out / "run").values()} == {"rise-lean"}
    grid = {"name": "s", "out": "/o", "queries": "/q", "systems": ["rise-lean"], "models": ["m"], "k": [10, 20]}
    grid["corpora"] = [{"name": "c", "docs": "/d", "index": "/i"}]
    assert [c.k for c in expand(parse_sweep({"sweep": grid}))] == [10, 20]  # it searches: one cell per K
    assert system_name("rise-lean") == "RISE lean" and system_name("unknown") == "unknown"


def test_structured_and_original_files(agent_world, fake_server):
    """rise reads files with a TOC; rise-bm25 the same relpaths with the TOC removed (DOCS/original/)."""
    out = run_dir("files")
    docid, title = next(iter(agent_world.titles.items()))
    queries = write_queries(out / "q.jsonl", [title_query(docid, title)])
    heads = {}
    for system in ("rise", "rise-bm25"):
        run_trajectories(run_config(out / system, queries, fake_server.base_url, system=system))
        t = read_trajectories(out / system)[docid]
        heads[system] = next(s["output"] for s in t["steps"] if s["tool"] == "read")
    assert "## Table of Contents" in heads["rise"]
    assert "## Table of Contents" not in heads["rise-bm25"]
    originals = DocStore(agent_world.docs / "original")
    for row in sample_rows(N_DOCS):  # the TOC-free twin is the corpus text, byte for byte
        assert originals.path(row["docid"]).read_bytes() == row["text"].encode()


def test_rerun_skips_and_changed_config_is_refused(agent_world, fake_server):
    out = run_dir("resume")
    queries = _queries(agent_world, out, 4)
    cfg = run_config(out / "run", queries, fake_server.base_url)
    first = run_trajectories(cfg)
    assert first["ran"] == 4
    before = fake_server.stats()["requests"]
    again = run_trajectories(run_config(out / "run", queries, fake_server.base_url, concurrency=1, llm_rpm=10))
    assert again["ran"] == 0 and again["skipped"] == 4 and fake_server.stats()["requests"] == before
    # one trajectory lost (or written under another config): only that one runs again
    victim = next((out / "run" / "trajectories").glob("*.json"))
    victim.unlink()
    assert run_trajectories(cfg)["ran"] == 1
    with pytest.raises(ConfigError, match="another configuration"):
        run_trajectories(run_config(out / "run", queries, fake_server.base_url, max_calls=9))
    fresh = run_trajectories(run_config(out / "run", queries, fake_server.base_url, max_calls=9, new_run=True))
    assert fresh["ran"] == 4 and list(out.joinpath("run").glob("superseded-*/trajectories/*.json"))


def test_concurrent_workspaces_never_see_each_others_files(agent_world, fake_server):
    out = run_dir("isolation")
    queries = _queries(agent_world, out, 8, start=2)
    cfg = run_config(out / "run", queries, fake_server.base_url, concurrency=8, keep_workspaces=True)
    run_trajectories(cfg)
    trajectories = read_trajectories(out / "run")
    spans = []
    seen_sets = set()
    for qid, t in trajectories.items():
        ws = out / "run" / "workspaces" / qid
        arrived = {a.docid for a in read_manifest(ws)}
        files = {str(p.relative_to(ws / "files")) for p in (ws / "files").rglob("*") if p.is_file()}
        assert arrived == set(t["retrieved_docids"])
        assert files == {a.relpath for a in read_manifest(ws)}
        # everything bash and read showed the agent came from its own workspace
        assert set(t["surfaced_docids"]) <= arrived
        seen_sets.add(frozenset(arrived))
    assert len(seen_sets) > 1, "the queries should retrieve different documents"
    events = [json.loads(line) for line in (out / "run" / "events.jsonl").read_text().splitlines()]
    for qid in trajectories:
        ts = [e["t"] for e in events if e["query_id"] == qid and e["event"] in ("start", "end")]
        spans.append((min(ts), max(ts)))
    overlapping = sum(1 for a in spans for b in spans if a is not b and a[0] < b[1] and b[0] < a[1])
    assert overlapping > 0, "the trajectories did not run at the same time"


def test_workspaces_are_removed_unless_kept(agent_world, fake_server):
    out = run_dir("cleanup")
    queries = _queries(agent_world, out, 2)
    run_trajectories(run_config(out / "run", queries, fake_server.base_url))
    assert [p.name for p in (out / "run" / "workspaces").iterdir()] == [MARKER]  # only the run's marker


def _sandboxes() -> set[int]:
    """Processes below this one that run a long-lived sandbox (bwrap and its supervisor carry its boot line)."""
    found = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if BOOT in " ".join(p.cmdline()):
                found.add(p.pid)
        except psutil.Error:
            pass
    return found


def test_each_trajectory_ends_its_sandbox(agent_world, fake_server):
    """A trajectory's long-lived sandbox ends with the trajectory, not whenever the garbage collector gets to its
    tool set (a reference cycle): the collector ran the close, which waits for bwrap to exit, in whatever thread
    it collected in, a search call's or the event loop's, for seconds on a busy node. With the collector off only
    the run's own closing can end them."""
    out = run_dir("sandbox-end")
    queries = _queries(agent_world, out, 3)
    before = _sandboxes()
    gc.collect()
    gc.disable()
    try:
        stats = run_trajectories(run_config(out / "run", queries, fake_server.base_url))
        left = _sandboxes() - before
    finally:
        gc.enable()
    assert stats["stop_reasons"] == {"answered": 3}
    assert not left, f"sandboxes still running after the run: {sorted(left)}"


def test_cli_run(agent_world, fake_server, capsys):
    out = run_dir("cli")
    queries = _queries(agent_world, out, 2)
    argv = ["run", "--queries", str(queries), "--system", "retrieval-agent", "--index", str(agent_world.index)]
    argv += ["--docs", str(agent_world.docs), "--out", str(out / "run"), "--base-url", fake_server.base_url]
    argv += ["--workers", "0", "--index-backend", "numpy", "--no-progress", "--tpm", "100000000", "--max-calls"]
    assert main([*argv, "3"]) == 0
    printed = capsys.readouterr().out
    assert "run system=retrieval-agent" in printed and "answered:2" in printed
    assert main([*argv, "0"]) == 2  # validated at the edge
    assert main(["run", "--queries", str(queries), "--system", "nope", "--docs", "x", "--out", "y"]) == 2


def test_tool_events_split_each_call_into_phases(agent_world, fake_server):
    """Every tool_call event of a RISE run says where its time went (issue 14: a 1M run's p99 could not be split):
    the wait for a tool thread, per tool the BM25 search, the linking and the previews, or the sandbox's lock, the
    call's start inside the long-lived bubblewrap and the command itself, then the wait for the event loop; each
    phase is measured, never derived, and together they fit inside the call the loop timed."""
    out = run_dir("phases")
    run_trajectories(run_config(out / "run", _queries(agent_world, out, 2), fake_server.base_url, system="rise"))
    events = [json.loads(line) for line in (out / "run" / "events.jsonl").read_text().splitlines()]
    calls = [e for e in events if e["event"] == "tool_call"]
    want = {
        "search": {"search_ms", "prefetch_ms", "link_ms", "preview_ms"},
        "bash": {"lock_ms", "start_ms", "exec_ms"},
        "read": set(),
    }
    assert {e["tool"] for e in calls} >= {"search", "bash"}
    for e in calls:
        phases = e["phases"]
        assert set(phases) == want[e["tool"]] | {"queue_ms", "resume_ms"}, e
        assert all(isinstance(v, float) and v >= 0 for v in phases.values()), e
        assert sum(phases.values()) <= e["seconds"] * 1000 + 1.0, e  # rounding: 0.1 ms per phase at most
        thread = e["thread"]  # the tool thread's time on a CPU and waiting for one, by the kernel's accounting
        assert set(thread) == {"cpu_ms", "runq_ms"} and min(thread.values()) >= 0, e
        assert thread["cpu_ms"] + thread["runq_ms"] <= e["seconds"] * 1000 + 1.0, e


def test_a_query_failing_in_every_run_is_given_up_after_three(agent_world, fake_server):
    """A transient failure leaves a query retryable (exit 75) until it has ended so in `llm.max_transient_runs` runs
    in a row; then its trajectory is an `api_error` naming each run's failure, no longer retryable, and the run
    ends."""
    from rise_batch.errors import RunIncomplete

    out = run_dir("transient-runs")
    queries = _queries(agent_world, out, 2)
    fake_server.configure(p500=1.0)
    cfg = run_config(out / "run", queries, fake_server.base_url, llm_max_attempts=1)
    for n in (1, 2):
        with pytest.raises(RunIncomplete):
            run_trajectories(cfg)
        assert {t["transient_runs"] for t in read_trajectories(out / "run").values()} == {n}
    stats = run_trajectories(cfg)
    assert stats["stop_reasons"] == {"api_error": 2} and stats["retryable"] == 0
    for t in read_trajectories(out / "run").values():
        assert "retryable" not in t and t["transient_runs"] == 3
        assert "in 3 runs in a row" in t["error"] and "run 1: " in t["error"] and "Error code: 500" in t["error"]


def test_replies_with_a_lone_surrogate_escape_are_kept(agent_world, fake_server):
    """Every reply's text ends in a `\\ud800` escape (valid JSON that orjson refuses): each is decoded, the lone
    surrogate replaced, and the trajectory goes on to its answer, each reply bought once and paid."""
    out = run_dir("surrogates")
    queries = _queries(agent_world, out, 2)
    fake_server.configure(p_surrogate=1.0)
    stats = run_trajectories(run_config(out / "run", queries, fake_server.base_url))
    assert stats["stop_reasons"] == {"answered": 2}
    calls = sum(t["model_calls"] for t in read_trajectories(out / "run").values())
    assert fake_server.stats()["requests"] == calls  # none retried
    for t in read_trajectories(out / "run").values():
        assert t["final_text"].endswith("\ufffd") and t["cost_usd"] > 0 and t["cancelled_calls"] == 0
