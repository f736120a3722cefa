"""A context overflow fails the same way every time: it is never retried, whatever status the server sends it with,
and a server that says its context size (llama.cpp's `GET /props`) gets documents cut to fit before they are sent.

Real HTTP: the fake server answering as llama.cpp does (a prompt over the slot: 400 "exceeds the available context
size"; a slot filled while generating: 500 "Context size has been exceeded."), through the real client and its
transports (the direct path and the openai SDK's), and the real `rise-batch structure` in a subprocess."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from rise_batch.config import LLMConfig
from rise_batch.fake_llm import FakeLLMServer
from rise_batch.llm.client import LLMClient
from rise_batch.llm.context import server_context
from rise_batch.llm.errors import LLMError
from rise_batch.structuring.checkpoint import CheckpointStore
from tests.conftest import SAMPLE

N = 12


def structure(out: Path, base_url: str, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "rise_batch.cli", "structure", "--corpus", str(SAMPLE), "--out", str(out)]
    cmd += ["--backend", "llm", "--base-url", base_url, "--workers", "0", "--limit", str(N), "--shard-docs", "6"]
    cmd += ["--tpm", "100000000", "--rpm", "100000", "--no-progress", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def chat_once(base_url: str, backend: str, text: str) -> tuple[object, dict]:
    """One chat() with 8 attempts allowed: the reply's text or the LLMError's (kind, status, attempts)."""
    cfg = LLMConfig(base_url=base_url, http_backend=backend, rpm=10**6, max_attempts=8)

    async def nap(_: float) -> None:
        return None

    async def go() -> tuple[object, dict]:
        async with LLMClient(cfg, sleep=nap) as client:
            try:
                return (await client.chat([{"role": "user", "content": text}])).text, client.stats.as_dict()
            except LLMError as e:
                return (e.kind, e.status, e.attempts), client.stats.as_dict()

    return asyncio.run(go())


@pytest.mark.parametrize("backend", ["direct", "httpx"])
def test_an_overflow_is_sent_once_whatever_its_status(backend: str) -> None:
    words = "lorem ipsum dolor sit amet " * 40
    with FakeLLMServer() as server:
        chat_once(server.base_url, backend, words)  # no context: answered, and its sizes are logged
        sizes = server.log()[-1]
        before = len(server.log())
        server.configure(n_ctx=sizes["prompt_tokens"] - 1)  # the prompt is over the slot: 400
        outcome, stats = chat_once(server.base_url, backend, words)
        assert outcome == ("context-overflow", 400, 1), outcome
        server.configure(n_ctx=sizes["prompt_tokens"] + 1)  # the prompt fits, prompt + reply does not: 500
        outcome, stats = chat_once(server.base_url, backend, words)
        assert outcome == ("context-overflow", 500, 1), outcome
        assert stats["retries"] == 0 and stats["server_errors"] == 0 and stats["client_errors"] == 1
        faults = [e["fault"] for e in server.log(before)]
        assert faults == ["context-prompt", "context-generation"]  # one request each, never retried


def test_the_context_a_server_says_is_read_where_llama_cpp_says_it() -> None:
    with FakeLLMServer(n_ctx=4096) as server:
        said = server_context(LLMConfig(base_url=server.base_url))
        assert said == (4096, server.base_url[: -len("/v1")] + "/props")
    with FakeLLMServer() as server:  # a server that does not say: nothing is cut
        assert server_context(LLMConfig(base_url=server.base_url)) is None


def test_documents_are_cut_to_the_servers_context_before_they_are_sent(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with FakeLLMServer(n_ctx=8192) as server:
        done = structure(out, server.base_url)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "says its context holds 8192 tokens" in done.stderr
        faults = {e.get("fault") for e in server.log()}
        assert not faults & {"context-prompt", "context-generation"}, faults
        assert server.stats()["requests"] == N  # each document bought once: nothing overflowed, nothing retried
    rows = CheckpointStore(out).read_rows()
    assert len(rows) == N and not [r for r in rows if r.outcome == "error"]
    assert sum(r.parse_note == "input-truncated" for r in rows) >= 6  # the long half of the sample was cut
    stats = json.loads((out / "stats.json").read_text())
    assert stats["docs_total"] == N and "error" not in stats["outcomes"]


def test_a_context_with_no_room_for_a_document_is_refused_before_paying(tmp_path: Path) -> None:
    with FakeLLMServer(n_ctx=4096) as server:  # the default --max-output-tokens 4096 fills it alone
        done = structure(tmp_path / "out", server.base_url)
        assert done.returncode == 2, done.stderr[-2000:]
        line = done.stderr.strip().splitlines()[-1]
        assert "/props says its context holds 4096 tokens" in line and "lower --max-output-tokens" in line
        assert server.stats()["requests"] == 0
