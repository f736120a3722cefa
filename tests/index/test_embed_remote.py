"""`--embedder openai:MODEL`: a dense index built and searched through a real `/embeddings` server over HTTP.

The fake server plays the embedding model (hashed bag-of-words vectors, so retrieval is meaningful); `rise-batch`
runs as real subprocesses. Asserted: the build, its recorded identity and cost, `eval-retrieval` on it, a query
embedder that differs refused, retries and pricing of the client's embeddings call, the cost cap, and a build
killed mid-way that resumes without sending a finished shard's passages again.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from rise_batch.config import LLMConfig
from rise_batch.fake_llm import FakeLLMServer
from rise_batch.fake_llm.faults import FaultConfig, choose_fault
from rise_batch.index.embed_remote import PROBE_TEXT
from rise_batch.llm.client import LLMClient
from tests.cli import cli, cli_argv, cli_env
from tests.conftest import write_jsonl

MODEL = "text-embedding-3-small"
DOCS = [
    {"docid": "d1", "text": "Lyon is a city in France on the Rhone river"},
    {"docid": "d2", "text": "Paris is the capital of France and its largest city"},
    {"docid": "d3", "text": "The Rhone flows from Switzerland into France"},
    {"docid": "d4", "text": "Berlin is the capital of Germany"},
    {"docid": "d5", "text": "Vienna lies on the Danube in Austria"},
    {"docid": "d6", "text": "Madrid is the capital of Spain"},
]
QUERIES = [
    {"query_id": "q1", "query": "capital of France", "gold_doc_ids": ["d2"]},
    {"query_id": "q2", "query": "Danube Austria", "gold_doc_ids": ["d5"]},
    {"query_id": "q3", "query": "Switzerland Rhone", "gold_doc_ids": ["d3"]},
]


def build_argv(corpus: Path, out: Path, base_url: str, *more: str) -> list[str]:
    return [
        "index", "--corpus", str(corpus), "--out", str(out), "--retriever", "dense", "--embedder", f"openai:{MODEL}",
        "--base-url", base_url, "--shard-docs", "2", "--passages", "doc", "--embed-batch", "1", "--no-progress", *more,
    ]  # fmt: skip


def embedding_requests(server: FakeLLMServer, since: int = 0) -> list[dict]:
    return [e for e in server.log(since) if e["path"] == "/v1/embeddings"]


def test_build_search_and_eval_retrieval_through_an_embeddings_server(tmp_path):
    write_jsonl(tmp_path / "c.jsonl", DOCS)
    write_jsonl(tmp_path / "q.jsonl", QUERIES)
    with FakeLLMServer() as server:
        done = cli(*build_argv(tmp_path / "c.jsonl", tmp_path / "i", server.base_url), check=True)
        assert f"embedder=openai:{MODEL} dim=256" in done.stdout
        sent = embedding_requests(server)
        assert len(sent) == 1 + len(DOCS)  # the dimension probe, then one request per document (--embed-batch 1)
        assert all(e["status"] == 200 for e in sent)
        meta = json.loads((tmp_path / "i" / "dense" / "meta.json").read_text())
        assert (meta["embedder"], meta["dim"], meta["base_url"]) == (f"openai:{MODEL}", 256, server.base_url)
        tokens = sum(e["prompt_tokens"] for e in sent)
        assert meta["build"]["input_tokens"] == tokens
        assert meta["build"]["cost_usd"] == pytest.approx(round(tokens * 0.02 / 1e6, 6))  # the price table's rate
        assert not (tmp_path / "i" / ".dense-partial").exists() and not (tmp_path / ".i.building").exists()

        argv = ["eval-retrieval", "--index", str(tmp_path / "i"), "--queries", str(tmp_path / "q.jsonl")]
        res = cli(*argv, "--retriever", "dense", "--k", "1,3", "--out", str(tmp_path / "r.json"), check=True)
        assert "recall@1     1.0000" in res.stdout, res.stdout  # the queries' words pick their documents
        other = cli(*argv, "--retriever", "dense", "--embedder", "openai:text-embedding-3-large")
        assert other.returncode == 2 and "another vector space" in other.stderr


def test_client_embed_is_retried_priced_and_ordered():
    async def go(base_url: str) -> tuple:
        cfg = LLMConfig(base_url=base_url, model=MODEL, max_attempts=3)
        async with LLMClient(cfg, backoff_initial_s=0.001) as client:
            got = await client.embed(["alpha beta", "gamma", "alpha"])
            return got, client.stats

    with FakeLLMServer(p500=1.0, max_faults_per_key=1, seed=3) as server:  # every request fails once, then answers
        got, stats = asyncio.run(go(server.base_url))
    assert len(got.vectors) == 3 and got.attempts == 2 and stats.retries == 1 and stats.server_errors == 1
    assert got.cost_usd == pytest.approx(got.input_tokens * 0.02 / 1e6) and got.input_tokens > 0
    a, b, c = (np.asarray(v) for v in got.vectors)
    assert a @ c > 0.5 and abs(b @ c) < 1e-9  # shared words, shared dimensions; input order kept


def test_the_cost_cap_stops_a_build_before_it_passes(tmp_path):
    write_jsonl(tmp_path / "c.jsonl", DOCS)
    with FakeLLMServer() as server:
        done = cli(*build_argv(tmp_path / "c.jsonl", tmp_path / "i", server.base_url), "--max-cost", "1e-9")
    assert done.returncode == 3, done.stderr
    assert "--max-cost" in done.stderr and not (tmp_path / "i" / "dense").exists()


def shard_of_hang(seed: int) -> bool:
    """Whether with `seed` (p_hang .5) the probe and shards 0-1 answer and a document of shard 2 hangs."""
    config = FaultConfig().updated({"p_hang": 0.5, "seed": seed})

    def hangs(text: str) -> bool:
        return choose_fault(config, hashlib.blake2b(text.encode(), digest_size=8).hexdigest(), 0) == "hang"

    texts = [d["text"] for d in DOCS]
    return not hangs(PROBE_TEXT) and not any(map(hangs, texts[:4])) and any(map(hangs, texts[4:]))


def test_a_killed_build_resumes_without_resending_finished_shards(tmp_path):
    write_jsonl(tmp_path / "c.jsonl", DOCS)
    seed = next(s for s in range(10_000) if shard_of_hang(s))
    out = tmp_path / "i"
    with FakeLLMServer() as server:
        cli(*build_argv(tmp_path / "c.jsonl", tmp_path / "ref", server.base_url), check=True)
        server.reset()  # attempt counts from 0 again: the fault draws below are those of first attempts
        server.configure(p_hang=0.5, seed=seed)  # shard 2's request hangs: the build is stuck there, shards 0-1 done
        proc = subprocess.Popen(cli_argv(*build_argv(tmp_path / "c.jsonl", out, server.base_url)), env=cli_env())
        partial = tmp_path / ".i.building" / ".dense-partial"  # the build's stage beside OUT, kept for a re-run
        deadline = time.monotonic() + 120
        while not (len(list(partial.glob("shard-*.json"))) == 2 and server.stats()["in_flight"] >= 1):
            assert proc.poll() is None and time.monotonic() < deadline, "the build ended before its hang"
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        server.configure(p_hang=0.0)
        mark = len(server.log())
        cli(*build_argv(tmp_path / "c.jsonl", out, server.base_url), check=True)
        resent = [e["head"] for e in embedding_requests(server, mark)]
    assert sorted(resent) == sorted([PROBE_TEXT, DOCS[4]["text"], DOCS[5]["text"]])  # shards 0 and 1 never again
    for name in ("embeddings.npy", "passage_offsets.npy"):
        if (tmp_path / "ref" / "dense" / name).exists():
            assert (out / "dense" / name).read_bytes() == (tmp_path / "ref" / "dense" / name).read_bytes()
    assert json.loads((out / "docids.json").read_text()) == [d["docid"] for d in DOCS]
    assert not (out / ".dense-partial").exists() and not (tmp_path / ".i.building").exists()
