"""`structure` with structured outputs, end to end against the fake server over HTTP: the TOC schema is sent
(online and in Batch API lines), each row records whether its reply was schema-constrained, a server that refuses
the schema switches it off once with the switch in stats.json and the summary, `--no-structured-output` sends
none, and a run made without it is resumed only with the flag (a real `rise-batch structure` subprocess)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from rise_batch.fake_llm import FakeLLMServer
from rise_batch.structuring.checkpoint import CheckpointStore, part_record
from rise_batch.structuring.job import run_structure
from rise_batch.types import DocResult
from tests.cli import cli
from tests.structuring.test_batch import config as batch_config

N_DOCS = 12


@pytest.fixture(autouse=True)
def _no_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "")


def config(out: Path, corpus: Path, server: FakeLLMServer, **kw):
    return batch_config(out, corpus, server, **({"limit": N_DOCS, "shard_docs": 6} | kw))


def llm_rows(out: Path) -> list[DocResult]:
    return [r for r in CheckpointStore(out).read_rows() if r.tier == "llm" and r.attempts]


def chat_log(server: FakeLLMServer) -> list[dict]:
    return [e for e in server.log() if e.get("responder") == "structure" or e.get("fault") == "response-format"]


@pytest.mark.parametrize("mode", ["online", "batch"])
def test_requests_carry_the_schema_and_rows_say_they_were_constrained(tmp_path, sample_path, mode) -> None:
    out = tmp_path / "out"
    with FakeLLMServer() as server:
        stats = run_structure(config(out, sample_path, server, mode=mode))
        sent = chat_log(server)
    rows = llm_rows(out)
    assert rows and all(r.schema_constrained for r in rows)
    assert sent and all(e["response_format"] == "json_schema" for e in sent)
    assert stats["docs_schema_constrained"] == len(rows) and stats["structured_output"] == "on"
    assert json.loads((out / "stats.json").read_text())["docs_schema_constrained"] == len(rows)


@pytest.mark.parametrize(("mode", "retry"), [("online", "online"), ("batch", "online"), ("batch", "batch")])
def test_a_server_without_structured_outputs_is_used_without_them(tmp_path, sample_path, mode, retry) -> None:
    out = tmp_path / "out"
    with FakeLLMServer(response_format="refuse") as server:
        stats = run_structure(config(out, sample_path, server, mode=mode, batch_retry=retry))
        log = server.log()
    rows = llm_rows(out)
    assert rows and not any(r.schema_constrained for r in rows)
    assert not any(r.outcome == "error" for r in CheckpointStore(out).read_rows())  # every document structured
    assert stats["outcomes"].get("toc", 0) == len(rows)
    assert stats["structured_output"] == "refused" and stats["structured_output_switched_off"] == 1
    answered = [e for e in log if e.get("responder") == "structure"]
    assert answered and all(e["response_format"] is None for e in answered)
    if mode == "online":  # only requests already in flight at the first refusal were refused, each sent again
        refused = [e["status"] for e in log].count(400)
        assert 1 <= refused == stats["transport"]["structured_output_refused"] <= 32 and len(answered) == len(rows)


def test_cli_refused_schema_is_warned_and_recorded_in_stats_and_summary(tmp_path, sample_path) -> None:
    out = tmp_path / "out"
    with FakeLLMServer(response_format="refuse") as server:
        args = ["structure", "--corpus", str(sample_path), "--out", str(out), "--backend", "llm", "--limit", "6"]
        flags = ["--workers", "0", "--base-url", server.base_url, "--rpm", "100000", "--no-progress"]
        done = cli(*args, *flags, "--concurrency", "1")
        statuses = [e["status"] for e in server.log()]
    assert done.returncode == 0, done.stderr
    assert statuses.count(400) == 1 and statuses[:2] == [400, 200]  # one request refused, then none carried it
    assert "refused structured outputs" in done.stderr and "--no-structured-output" in done.stderr
    assert "structured_output=refused" in done.stdout
    stats = json.loads((out / "stats.json").read_text())
    assert stats["structured_output"] == "refused" and stats["transport"]["structured_output_disabled"] == 1


def test_no_structured_output_and_resuming_a_run_made_without_it(tmp_path, sample_path) -> None:
    out = tmp_path / "out"
    with FakeLLMServer() as server:
        base = ["structure", "--corpus", str(sample_path), "--out", str(out), "--backend", "llm", "--workers", "0"]
        base += ["--base-url", server.base_url, "--rpm", "100000", "--no-progress"]
        first = cli(*base, "--limit", "6", "--no-structured-output")
        assert first.returncode == 0, first.stderr
        assert {e["response_format"] for e in chat_log(server)} == {None}
        assert not any(r.schema_constrained for r in llm_rows(out))
        assert json.loads((out / "stats.json").read_text())["structured_output"] == "off"
        n = len(server.log())
        again = cli(*base, "--limit", "6")  # the default turned on: the outputs would differ, so it is refused
        assert again.returncode == 2 and len(server.log()) == n
        assert "made without structured outputs: add --no-structured-output to resume it" in again.stderr
        assert again.stderr.count("\n") == 1 and "--new-run" in again.stderr
        # a manifest from before the setting existed reads as made without it
        manifest = json.loads((out / "manifest.json").read_text())
        del manifest["config"]["llm"]["structured_output"]
        (out / "manifest.json").write_text(json.dumps(manifest))
        assert "add --no-structured-output" in cli(*base, "--limit", "6").stderr
        resumed = cli(*base, "--limit", "6", "--no-structured-output")
        assert resumed.returncode == 0, resumed.stderr
        assert len(server.log()) == n  # resumed, nothing bought again


def test_parts_of_an_older_version_without_the_column_read_and_verify(tmp_path, sample_path) -> None:
    out = tmp_path / "out"
    base = ["structure", "--corpus", str(sample_path), "--out", str(out), "--limit", "20", "--shard-docs", "10"]
    assert cli(*base, "--no-progress").returncode == 0
    store = CheckpointStore(out)
    for sid in (0, 1):  # rewrite every part as an older version wrote it, and its done marker's records
        for path in store.parts(sid):
            table = pq.read_table(path)
            pq.write_table(table.drop_columns(["schema_constrained"]), path)
        marker = store.shard_stats(sid)
        marker["parts"] = [part_record(p, rows) for p, rows in store.read_parts(sid)]
        store.stats_path(sid).write_text(json.dumps(marker))
    verified = cli(*base, "--no-progress", "--verify")
    assert verified.returncode == 0, verified.stderr
    assert "damaged" not in verified.stderr and not (out / "damaged").exists()
    rows = store.read_rows()
    assert len(rows) == 20 and not any(r.schema_constrained for r in rows)
