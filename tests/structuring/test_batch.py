"""`structure --mode batch` end to end against the fake server's Batch API, `--max-cost`, tiering, input cut.

The fake server plays the model and the Batch API; everything else is real: Parquet checkpoint, structured files,
the manifest, and (for the kill test) a real `rise-batch structure` subprocess killed with SIGKILL.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rise_batch.config import ConfigError, load_structure_config
from rise_batch.fake_llm import FakeLLMServer
from rise_batch.structuring.budget import EXIT_BUDGET, BudgetExceeded
from rise_batch.structuring.checkpoint import CheckpointStore
from rise_batch.structuring.job import run_structure
from tests.conftest import sample_rows
from tests.structuring.test_kill_resume import OUTPUT_FIELDS, doc_key, outputs

N_DOCS = 30


@pytest.fixture(autouse=True)
def _no_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "")


def config(out: Path, corpus: Path, server: FakeLLMServer, **kw):
    base = {
        "corpus": str(corpus),
        "out": str(out),
        "backend": "llm",
        "limit": N_DOCS,
        "shard_docs": 10,
        "progress": False,
        "workers": 0,
        "llm_base_url": server.base_url,
        "llm_rpm": 100_000,  # online parts must not wait for the client's own limiter
        "llm_tpm": 100_000_000,
        "batch_poll_s": 0.01,
    }
    return load_structure_config(None, **(base | kw))


@pytest.fixture(scope="module")
def reference(tmp_path_factory, sample_path):
    """An online run of the same documents: what batch mode must reproduce."""
    out = tmp_path_factory.mktemp("ref") / "out"
    os.environ["OPENAI_API_KEY"] = ""
    with FakeLLMServer() as server:
        stats = run_structure(config(out, sample_path, server))
    return outputs(out), stats


def rows_of(out: Path) -> dict[str, object]:
    return {r.docid: r for r in CheckpointStore(out).read_rows()}


def test_batch_mode_reproduces_online_outputs_at_half_the_price(tmp_path, sample_path, reference) -> None:
    expected, online = reference
    out = tmp_path / "out"
    with FakeLLMServer() as server:
        stats = run_structure(config(out, sample_path, server, mode="batch", batch_max_requests=15))
        counts = server.batch_api.stats()
        assert server.stats()["by_path"].get("/v1/chat/completions", 0) == 0  # every call went through batches
    assert outputs(out) == expected
    assert stats["docs_total"] == N_DOCS and stats["llm_calls"] == online["llm_calls"]
    for k in ("input_tokens", "cached_input_tokens", "output_tokens"):
        assert stats[k] == online[k]
    assert stats["cost_usd"] == pytest.approx(online["cost_usd"] / 2, rel=1e-3)
    # packs of whole shards: 10 + 10 docs (15 requests did not fill it before the second shard), then 10
    assert counts["batches_created"] == 3 and stats["transport"]["batches"] == 3
    manifest = json.loads((out / "batches.json").read_text())
    assert sorted(manifest["groups"]) == ["pack-00000.r0", "pack-00001.r0"]
    assert manifest["groups"]["pack-00000.r0"]["meta"]["shards"] == [0, 1]
    # re-running a finished batch job touches nothing
    again = run_structure(config(out, sample_path, server, mode="batch"))
    assert again["docs_total"] == N_DOCS and again.get("resumed_done") == 3


@pytest.mark.parametrize("retry", ["online", "batch"])
def test_failed_lines_are_retried_by_policy(tmp_path, sample_path, reference, retry) -> None:
    expected_rows = {r[0]: r for r in reference[0][0]}
    out = tmp_path / "out"
    with FakeLLMServer() as server:
        server.batch_api.configure(p_line_error=0.3)
        stats = run_structure(config(out, sample_path, server, mode="batch", batch_retry=retry, batch_max_rounds=4))
        failed = server.batch_api.stats()["lines_failed"]
        online_calls = server.stats()["by_path"].get("/v1/chat/completions", 0)
    assert failed > 0
    rows = rows_of(out)
    assert len(rows) == N_DOCS
    for docid, row in rows.items():
        if row.outcome == "error":  # only when a line failed in every round it was allowed
            assert retry == "batch" and "after 4 batch rounds" in row.error
        else:
            assert tuple(getattr(row, f) for f in OUTPUT_FIELDS) == expected_rows[docid]
    if retry == "online":
        assert online_calls == failed and stats["transport"]["online_calls"] == failed
        assert all(r.outcome == "toc" for r in rows.values())
    else:
        assert online_calls == 0
        assert stats["transport"]["batch_groups"] > 2  # later rounds carried the failed lines
        assert sum(r.outcome == "toc" for r in rows.values()) >= N_DOCS - 1


def test_an_expired_batch_is_finished_online(tmp_path, sample_path, reference) -> None:
    out = tmp_path / "out"
    with FakeLLMServer() as server:
        server.batch_api.configure(expire_after=4)
        cfg = config(out, sample_path, server, mode="batch", batch_max_requests=10, batch_max_active=1)
        stats = run_structure(cfg)
        assert server.batch_api.stats()["by_status"] == {"expired": 3}
        assert server.stats()["by_path"]["/v1/chat/completions"] == N_DOCS - 3 * 4
    assert outputs(out) == reference[0]
    assert stats["transport"]["batch_lines_failed"] == N_DOCS - 12


def start(cfg_path: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "rise_batch.cli", "structure", "--config", str(cfg_path), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=os.environ | {"OPENAI_API_KEY": ""},
    )


def write_config(path: Path, corpus: Path, out: Path, base_url: str, **extra) -> Path:
    cfg = {
        "corpus": str(corpus),
        "out": str(out),
        "backend": "llm",
        "mode": "batch",
        "limit": N_DOCS,
        "shard_docs": 10,
        "progress": False,
        "llm": {"base_url": base_url, "rpm": 100_000, "tpm": 100_000_000},
        "batch": {"poll_s": 0.02, "max_requests": 10},
    } | extra
    path.write_text(yaml.safe_dump(cfg))
    return path


def batch_ids(out: Path) -> list[str]:
    try:
        manifest = json.loads((out / "batches.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return []
    return [f["batch_id"] for g in manifest["groups"].values() for f in g["files"] if f.get("batch_id")]


def test_driver_killed_between_submit_and_collect_resumes_without_resubmitting(tmp_path, sample_path, reference):
    with FakeLLMServer() as server:
        for kill_after in (1, 3):  # batches created when the driver dies: some packs, or all of them
            out = tmp_path / f"kill{kill_after}"
            cfg_path = write_config(tmp_path / f"k{kill_after}.yaml", sample_path, out, server.base_url)
            before = server.batch_api.stats()
            server.batch_api.configure(hold=True)  # batches stay in progress: the kill lands before any collect
            proc = start(cfg_path)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and proc.poll() is None and len(batch_ids(out)) < kill_after:
                time.sleep(0.01)
            assert proc.poll() is None, proc.stderr.read().decode()
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            submitted = batch_ids(out)
            assert len(submitted) >= kill_after and CheckpointStore(out).read_rows() == []
            with pytest.raises(ConfigError, match="resume with --mode batch"):
                run_structure(config(out, sample_path, server, shard_docs=10))  # online would pay twice
            server.batch_api.configure(hold=False)
            resumed = start(cfg_path)
            assert resumed.wait(timeout=300) == 0, resumed.stderr.read().decode()
            after = server.batch_api.stats()
            assert after["batches_created"] - before["batches_created"] == 3  # one per pack, none twice
            assert after["files_uploaded"] - before["files_uploaded"] == 3
            assert batch_ids(out)[: len(submitted)] == submitted
            assert outputs(out) == reference[0]


def test_max_cost_stops_cleanly_with_exit_code_3_and_a_higher_limit_resumes(tmp_path, sample_path, reference):
    out = tmp_path / "out"
    keys = {r["docid"]: doc_key(r["text"]) for r in sample_rows(N_DOCS)}
    with FakeLLMServer() as server:
        cfg_path = write_config(tmp_path / "c.yaml", sample_path, out, server.base_url, mode="online", workers=0)
        proc = start(cfg_path, "--max-cost", "0.03", "--concurrency", "2", "--json")
        assert proc.wait(timeout=300) == EXIT_BUDGET
        message = proc.stderr.read().decode()
        assert "--max-cost $0.0300" in message and "checkpoint is intact" in message
        rows = rows_of(out)
        assert 0 < len(rows) < N_DOCS
        assert sum(r.cost_usd for r in rows.values()) <= 0.03
        printed = json.loads(proc.stdout.read())  # --json prints its object at the cap too
        assert printed["exit_code"] == EXIT_BUDGET and "--max-cost $0.0300" in printed["message"]
        assert printed["cost_usd"] == pytest.approx(sum(r.cost_usd for r in rows.values()), abs=1e-6)
        sent = {e["key"] for e in server.log() if e.get("key")}
        assert sent == {keys[d] for d in rows}  # every paid reply is in the checkpoint
        mark = len(server.log())
        cfg = config(out, sample_path, server, max_cost_usd=1.0, llm_concurrency=2)
        stats = run_structure(cfg)
        assert stats["docs_total"] == N_DOCS
        assert not {e["key"] for e in server.log(mark)} & sent  # nothing paid twice
    assert outputs(out) == reference[0]


def test_max_cost_in_batch_mode_submits_no_pack_past_the_limit(tmp_path, sample_path, reference) -> None:
    out = tmp_path / "out"
    with FakeLLMServer() as server:
        cfg = config(out, sample_path, server, mode="batch", batch_max_requests=10, max_cost_usd=0.02)
        with pytest.raises(BudgetExceeded):
            run_structure(cfg)
        assert server.batch_api.stats()["batches_created"] == 1
        rows = rows_of(out)
        assert len(rows) == 10 and sum(r.cost_usd for r in rows.values()) <= 0.02
        run_structure(config(out, sample_path, server, mode="batch", batch_max_requests=10, max_cost_usd=1.0))
        assert server.batch_api.stats()["batches_created"] == 3
    assert outputs(out) == reference[0]


@pytest.mark.parametrize("mode", ["online", "batch"])
def test_tiered_structuring_sends_only_the_chosen_documents(tmp_path, sample_path, mode) -> None:
    rows_in = sample_rows(N_DOCS)
    long_docs = {r["docid"] for r in rows_in if len(r["text"]) >= 30_000}
    listed = tmp_path / "docids.txt"
    listed.write_text("# surfaced by a retrieval run\n" + "\n".join(sorted(long_docs)[:5]) + "\n")
    for tier, chosen in (("chars>=30000", long_docs), (str(listed), set(sorted(long_docs)[:5]))):
        out = tmp_path / f"{mode}-{len(chosen)}"
        with FakeLLMServer() as server:
            stats = run_structure(config(out, sample_path, server, mode=mode, tier=tier))
            sent = {e["key"] for e in server.log() if e.get("key")}
        rows = rows_of(out)
        assert {d for d, r in rows.items() if r.tier == "llm"} == chosen
        assert all(r.tier == "heuristic" and r.cost_usd == 0 for d, r in rows.items() if d not in chosen)
        assert sent == {doc_key(r["text"]) for r in rows_in if r["docid"] in chosen}
        assert stats["llm_calls"] == len(chosen)
    untiered = config(tmp_path / "x", sample_path, server)
    tiered = config(tmp_path / "x", sample_path, server, tier="chars>=30000")
    from rise_batch.config import run_hash

    assert run_hash(untiered, "p") != run_hash(tiered, "p")  # a resume with another tier rule is refused


def test_long_documents_are_cut_to_the_input_budget_and_the_cut_is_recorded(tmp_path, sample_path) -> None:
    out = tmp_path / "out"
    with FakeLLMServer() as server:
        run_structure(config(out, sample_path, server, mode="batch", llm_max_input_chars=5000))
        biggest = max(e["prompt_tokens"] for e in server.log() if "prompt_tokens" in e)
    rows = rows_of(out)
    texts = {r["docid"]: r["text"] for r in sample_rows(N_DOCS)}
    assert biggest <= (5000 + 3000) // 4
    for docid, row in rows.items():
        assert ("input-truncated" in row.parse_note) == (len(texts[docid]) > 5000)
        if row.outcome == "toc":
            assert max(line for _, _, line in json.loads(row.sections_json)) <= texts[docid][:5000].count("\n")


def test_new_run_moves_the_batch_manifest_aside(tmp_path, sample_path) -> None:
    out = tmp_path / "out"
    with FakeLLMServer() as server:
        run_structure(config(out, sample_path, server, mode="batch", limit=10))
        first = json.loads((out / "batches.json").read_text())
        run_structure(config(out, sample_path, server, mode="batch", limit=20, new_run=True))
        assert server.batch_api.stats()["batches_created"] == 2
    (old,) = out.glob("superseded-*/batches.json")
    assert json.loads(old.read_text()) == first
    assert json.loads((out / "batches.json").read_text())["groups"]["pack-00000.r0"]["meta"]["shards"] == [0, 1]


def test_a_failed_batch_goes_to_a_new_round_never_online(tmp_path, sample_path, capfd) -> None:
    """A batch refused as a whole (here: the enqueued-token limit) costs nothing; paying for it online would
    silently double the bill, so its lines wait for a new batch round, and end as errors after the last."""
    out = tmp_path / "out"
    with FakeLLMServer() as server:
        server.batch_api.configure(fail_code="token_limit_exceeded")
        run_structure(config(out, sample_path, server, mode="batch", limit=10, batch_max_rounds=2))
        assert server.stats()["by_path"].get("/v1/chat/completions", 0) == 0
        assert server.batch_api.stats()["batches_created"] == 2
    assert "FAILED: token_limit_exceeded" in capfd.readouterr().err
    rows = rows_of(out)
    assert len(rows) == 10
    assert all(
        r.outcome == "error" and "batch_failed" in r.error and "after 2 batch rounds" in r.error for r in rows.values()
    )
