"""What a damaged checkpoint or a kill costs in paid replies, counted by the fake server on the other side of the wire.

The LLM backend runs against the project's fake OpenAI-compatible server over HTTP; the job runs in process (damaged
part) or as a real subprocess killed with SIGKILL. Asserted: a resume re-buys exactly the replies it says it does
(the server's request log is the reference), and finished replies are written within flush_seconds even when the
next replies stall, so a kill then loses none of them.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from rise_batch.config import load_structure_config
from rise_batch.fake_llm import FakeLLMServer
from rise_batch.structuring.checkpoint import CheckpointStore
from rise_batch.structuring.job import run_structure
from tests.conftest import sample_rows
from tests.structuring.test_kill_resume import doc_key, outputs, start

N_DOCS = 40


@pytest.fixture(autouse=True)
def _no_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "")


def settings(corpus: Path, out: Path, base_url: str, **kw) -> dict:
    base = {
        "corpus": str(corpus),
        "out": str(out),
        "backend": "llm",
        "limit": N_DOCS,
        "shard_docs": 20,
        "workers": 0,
        "progress": False,
        "llm": {"base_url": base_url, "concurrency": 4, "rpm": 100_000, "tpm": 100_000_000},
    }
    return base | kw


def replied(entries: list[dict]) -> list[str]:
    """Keys (documents) of the replies the server sent: the ones that are paid for."""
    return [e["key"] for e in entries if e.get("status") == 200]


def test_damaged_part_is_redone_from_the_kept_replies_buying_nothing_again(tmp_path, sample_path):
    out = tmp_path / "out"
    with FakeLLMServer() as server:
        s = settings(sample_path, out, server.base_url, flush_docs=5)
        s = {k: v for k, v in s.items() if k != "llm"} | {f"llm_{k}": v for k, v in s["llm"].items()}
        cfg = load_structure_config(None, **s)
        run_structure(cfg)
        expected = outputs(out)
        store = CheckpointStore(out)
        record = json.loads(store.stats_path(1).read_text())["parts"][1]
        part = store.parts_dir / record["file"]
        part.write_bytes(part.read_bytes()[:-100])  # truncated: footer gone
        assert record["rows"] == 5 and record["llm_calls"] >= 5
        mark = len(server.log())
        stats = run_structure(cfg)
        resent = replied(server.log(mark))
    assert stats["rebought_replies"] == record["llm_calls"]  # the part's documents were redone...
    assert stats["rebought_cost_usd"] == pytest.approx(record["cost_usd"], abs=1e-6)  # rounded as cost_usd
    assert resent == []  # ...from OUT's kept replies (money/replies.py): nothing went back to the server
    assert outputs(out) == expected


def kill_after(proc: subprocess.Popen, server: FakeLLMServer, n_replies: int, then: float = 0.0) -> list[dict]:
    """SIGKILL the job once the server has sent `n_replies` replies (and `then` seconds more); the log up to it."""
    deadline = time.monotonic() + 120
    while len(replied(server.log())) < n_replies and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    if then:
        server.configure(latency_ms=30_000)  # every request sent from now on stalls: no reply arrives
        time.sleep(then)
    assert proc.poll() is None, "the job finished before the kill point"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    server.configure(latency_ms=5)
    return server.log()


def test_replies_are_written_within_flush_seconds_even_when_the_next_ones_stall(tmp_path, sample_path):
    """flush_docs is never reached; replies stop after 12. Within flush_seconds the 12 must be on disk."""
    out = tmp_path / "out"
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(settings(sample_path, out, "", flush_docs=1000, flush_seconds=1.0)))
    with FakeLLMServer(latency_ms=5) as server:
        cfg = yaml.safe_load(config.read_text())
        cfg["llm"]["base_url"] = server.base_url
        config.write_text(yaml.safe_dump(cfg))
        before = kill_after(start(config), server, 12, then=2.5)
        keys = {r["docid"]: doc_key(r["text"]) for r in sample_rows(N_DOCS)}
        written = {keys[r.docid] for r in CheckpointStore(out).read_rows()}
        assert written == set(replied(before)) and len(written) >= 12
        resumed = start(config)
        assert resumed.wait(timeout=300) == 0, resumed.stderr.read().decode()
        resent = [k for k in replied(server.log(len(before))) if k in set(replied(before))]
    assert resent == []
    assert "rebought_replies" not in json.loads((out / "stats.json").read_text())


def test_a_resume_says_how_many_replies_a_kill_lost_and_buys_only_those_in_flight(tmp_path, sample_path):
    """Killed before its first part is due (default flush_seconds, flush_docs not reached): every reply so far is
    lost from the checkpoint. The resume reports the replies the job had received (its journal) and redoes those
    documents from OUT's kept replies: the server sees none of them again, only the at most `concurrency` requests
    that were in flight at the kill (their replies never reached the job)."""
    out = tmp_path / "out"
    with FakeLLMServer(latency_ms=5) as server:
        config = tmp_path / "c.yaml"
        config.write_text(yaml.safe_dump(settings(sample_path, out, server.base_url, flush_docs=1000)))
        before = kill_after(start(config), server, 10)
        written = {r.docid for r in CheckpointStore(out).read_rows()}
        shards = range(-(-N_DOCS // 20))  # in process the LLM backend runs two shards at once: both journal
        journal = {k: v for shard in shards for k, v in CheckpointStore(out).read_journal(shard).items()}
        resumed = start(config)
        assert resumed.wait(timeout=300) == 0, resumed.stderr.read().decode()
        stdout, stderr = resumed.stdout.read().decode(), resumed.stderr.read().decode()
        paid = set(replied(before))
        keys = {r["docid"]: doc_key(r["text"]) for r in sample_rows(N_DOCS)}
        resent = [k for k in replied(server.log(len(before))) if k in paid - {keys[d] for d in written}]
    stats = json.loads((out / "stats.json").read_text())
    assert written == set() and len(journal) >= 6  # nothing was due yet: every received reply was in memory only
    assert not {keys[d] for d in journal} & set(resent)  # every reply the job had received: kept, not bought again
    assert stats["rebought_replies"] == sum(r["llm_calls"] for r in journal.values())
    assert 0 <= len(resent) <= 4  # llm.concurrency: only replies in flight at the kill went back to the server
    assert f"rebought_replies={stats['rebought_replies']} " in stdout and "were never checkpointed" in stderr
    assert not any(CheckpointStore(out).journal_path(s).exists() for s in shards)  # finished shards keep none
