"""Batch API files (pure packing and parsing) and the resumable BatchRunner against the fake server's Batch API."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from rise_batch.fake_llm import FakeLLMServer
from rise_batch.llm.batch import (
    BatchResult,
    missing_result,
    pack_lines,
    parse_results,
    reply_from_body,
    request_line,
)
from rise_batch.llm.batch_runner import BatchRunner, async_client
from rise_batch.llm.pricing import PriceTable
from rise_batch.structure.propose import build_messages
from tests.conftest import sample_rows


def body(text: str, model: str = "gpt-5.4-nano") -> dict:
    return {"model": model, "messages": build_messages(text, "Split the document into sections.")}


def test_request_line_is_one_utf8_json_line() -> None:
    line = request_line("a|0|0", body("Zürich — ünïcode"))
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    rec = json.loads(line)
    assert rec == {
        "custom_id": "a|0|0",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": body("Zürich — ünïcode"),
    }
    assert "Zürich".encode() in line  # not \u-escaped: fewer bytes against the 200 MB limit


def test_pack_respects_both_limits_keeps_order_and_refuses_what_cannot_be_sent() -> None:
    reqs = [(f"r{i}", body("x" * (100 + i * 29))) for i in range(50)]
    sizes = {cid: len(request_line(cid, b)) for cid, b in reqs}
    files = list(pack_lines(reqs, max_requests=7, max_bytes=2_000))  # the largest request is ~1.8 kB
    assert [json.loads(x)["custom_id"] for f in files for x in f] == [cid for cid, _ in reqs]
    for f in files:
        assert len(f) <= 7 and sum(map(len, f)) <= 2_000
    # a file is closed only when the next request would not fit
    for f, nxt in zip(files, files[1:], strict=False):
        first = json.loads(nxt[0])["custom_id"]
        assert len(f) == 7 or sum(map(len, f)) + sizes[first] > 2_000
    with pytest.raises(ValueError, match="duplicate custom_id"):
        list(pack_lines([("a", body("x")), ("a", body("y"))]))
    with pytest.raises(ValueError, match="over the 500-byte file limit"):
        list(pack_lines([("big", body("x" * 1000))], max_bytes=500))


def test_parse_output_and_error_lines() -> None:
    ok = {"id": "1", "custom_id": "a", "response": {"status_code": 200, "body": {"choices": []}}, "error": None}
    http500 = {
        "custom_id": "b",
        "response": {"status_code": 500, "body": {"error": {"message": "boom", "type": "server_error"}}},
        "error": None,
    }
    bad400 = {"custom_id": "c", "response": {"status_code": 400, "body": {"error": {"code": "context_length"}}}}
    expired = {"custom_id": "d", "response": None, "error": {"code": "batch_expired", "message": "window"}}
    text = "\n".join(json.dumps(x) for x in (ok, http500, bad400, expired)) + "\n\n"
    a, b, c, d = parse_results(text.encode())
    assert a.ok and a.body == {"choices": []}
    assert (b.ok, b.status_code, b.error_code, b.error_message, b.retryable) == (
        False,
        500,
        "server_error",
        "boom",
        True,
    )
    assert (c.ok, c.error_code, c.retryable) == (False, "context_length", False)
    assert (d.ok, d.status_code, d.error_code, d.retryable) == (False, None, "batch_expired", True)
    assert missing_result("e", "cancelled").error_code == "batch_cancelled"
    with pytest.raises(ValueError, match="line 1 is not JSON"):
        list(parse_results(b"{nope\n"))


def test_reply_from_body_prices_at_the_batch_discount() -> None:
    prices = PriceTable.load()
    usage = {"prompt_tokens": 1000, "completion_tokens": 200, "prompt_tokens_details": {"cached_tokens": 0}}
    completion = {"model": "gpt-5.4-nano", "choices": [{"message": {"content": "{}"}}], "usage": usage}
    reply = reply_from_body(completion, prices)
    assert (reply.text, reply.input_tokens, reply.output_tokens) == ("{}", 1000, 200)
    assert reply.cost_usd == pytest.approx(prices.cost("gpt-5.4-nano", 1000, 0, 200) / 2)
    with pytest.raises(ValueError, match="no choices"):
        reply_from_body({"choices": [], "usage": usage}, prices)


def requests(n: int) -> list[tuple[str, dict]]:
    return [(row["docid"], body(row["text"])) for row in sample_rows(n)]


def run(coro):
    return asyncio.run(coro)


async def _run(server: FakeLLMServer, work: Path, group: str, reqs, **kw) -> dict[str, BatchResult]:
    client = async_client(server.base_url, "test")
    try:
        return await BatchRunner(client, work, poll_s=0.01, **kw).run(group, reqs)
    finally:
        await client.close()


def test_runner_packs_submits_polls_and_collects_every_result(tmp_path: Path) -> None:
    reqs = requests(7)
    with FakeLLMServer() as server:
        server.batch_api.configure(p_line_error=0.3, delay_s=0.05)
        results = run(_run(server, tmp_path, "g0", reqs, max_requests=3))
        stats = server.batch_api.stats()
        assert stats["batches_created"] == 3 and stats["files_uploaded"] == 3
        assert set(results) == {cid for cid, _ in reqs}
        failed = [r for r in results.values() if not r.ok]
        assert failed and all(r.status_code == 500 and r.retryable for r in failed)
        assert stats["lines_failed"] == len(failed)
        for r in results.values():
            if r.ok:
                assert json.loads(r.body["choices"][0]["message"]["content"])["sections"]
        manifest = json.loads((tmp_path / "batches.json").read_text())
        files = manifest["groups"]["g0"]["files"]
        assert [f["n"] for f in files] == [3, 3, 1] and all(f["status"] == "completed" for f in files)
        assert not list((tmp_path / "batches").glob("*.f?.jsonl"))  # inputs deleted once their batch exists
        # a second run of the same group re-submits nothing and reads the same results from disk
        again = run(_run(server, tmp_path, "g0", []))
        assert again == results
        assert server.batch_api.stats()["batches_created"] == 3


def test_runner_adopts_a_batch_created_before_a_kill(tmp_path: Path) -> None:
    """A kill between `batches.create` and the manifest write: the resumed runner finds the batch, pays once."""
    reqs = requests(3)
    with FakeLLMServer() as server:
        server.batch_api.configure(hold=True)

        async def submit_only() -> list[str]:
            client = async_client(server.base_url, "test")
            try:
                return await BatchRunner(client, tmp_path, keep_inputs=True).submit("g", reqs)
            finally:
                await client.close()

        (batch_id,) = run(submit_only())
        path = tmp_path / "batches.json"
        manifest = json.loads(path.read_text())
        entry = manifest["groups"]["g"]["files"][0]
        entry.update(batch_id=None, status="uploaded")  # the state a kill right after create leaves behind
        path.write_text(json.dumps(manifest))
        server.batch_api.configure(hold=False)
        results = run(_run(server, tmp_path, "g", []))
        assert all(r.ok for r in results.values()) and len(results) == 3
        stats = server.batch_api.stats()
        assert stats["batches_created"] == 1 and stats["files_uploaded"] == 1
        assert json.loads(path.read_text())["groups"]["g"]["files"][0]["batch_id"] == batch_id


def test_expired_and_cancelled_batches_report_every_missing_line(tmp_path: Path) -> None:
    reqs = requests(5)
    with FakeLLMServer() as server:
        server.batch_api.configure(expire_after=2)
        results = run(_run(server, tmp_path / "a", "g", reqs))
        assert [r.ok for r in results.values()] == [True, True, False, False, False]
        assert {r.error_code for r in results.values() if not r.ok} == {"batch_expired"}
        server.batch_api.configure(expire_after=None, hold=True)

        async def cancel() -> dict[str, BatchResult]:
            client = async_client(server.base_url, "test")
            try:
                runner = BatchRunner(client, tmp_path / "b", poll_s=0.01)
                await runner.submit("g", reqs)
                await runner.cancel("g")
                return await runner.wait("g")
            finally:
                await client.close()

        cancelled = run(cancel())
        assert {r.error_code for r in cancelled.values()} == {"batch_cancelled"} and len(cancelled) == 5


def test_a_file_that_breaks_the_rules_fails_the_batch(tmp_path: Path) -> None:
    reqs = [("a", body("one", "gpt-5.4-nano")), ("b", body("two", "gpt-5.4-mini"))]
    with FakeLLMServer() as server:
        results = run(_run(server, tmp_path, "g", reqs))
        assert {r.error_code for r in results.values()} == {"batch_failed"}
        manifest = json.loads((tmp_path / "batches.json").read_text())
        assert manifest["groups"]["g"]["files"][0]["status"] == "failed"
        assert any("mixed_models" in e for e in manifest["groups"]["g"]["files"][0]["errors"])


def test_unicode_line_separators_in_documents_survive_the_round_trip(tmp_path: Path) -> None:
    """Wikipedia text holds U+2028, U+2029 and U+0085: JSONL splits on \\n only, on both sides of the wire."""
    prose = "A sentence of ordinary prose that runs on for a while to make a paragraph. " * 8
    texts = [f"Heading\u2028one\n{prose}\nMore\x85text\n{prose}", f"Para\u2029graph\n{prose}", prose]
    reqs = [(f"doc {i}", body(t)) for i, t in enumerate(texts)]  # a space in a custom_id is fine too
    line = request_line("x", body(texts[0]))
    assert len(line.split(b"\n")) == 2 and len(line.decode().splitlines()) == 1
    assert json.loads(line)["body"] == body(texts[0])
    with FakeLLMServer() as server:
        results = run(_run(server, tmp_path, "g", reqs))
    assert sorted(results) == ["doc 0", "doc 1", "doc 2"] and all(r.ok for r in results.values())
    answer = {"custom_id": "y", "response": {"status_code": 200, "body": {"text": "a\u2028b\x85c"}}}
    (parsed,) = parse_results(json.dumps(answer, ensure_ascii=False).encode() + b"\n")  # raw inside a string
    assert parsed.body == {"text": "a\u2028b\x85c"}
    with pytest.raises(ValueError, match="no line break"):
        list(pack_lines([("a\nb", body("x"))]))
