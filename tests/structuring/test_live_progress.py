"""LLM structuring on real Ray shows documents as they finish, not whole shards: against a fake server that takes
1 s per reply, the progress line (written to stderr, not a terminal, as under `ray job submit`) moves within a
shard, never passes the total when a shard is redone after its worker died, and ends on the real count."""

from __future__ import annotations

import threading
import time

import psutil
import pytest

from rise_batch.config import load_structure_config
from rise_batch.fake_llm import FakeLLMServer
from rise_batch.progress import DEFAULT_EVERY_S, set_progress_every
from rise_batch.structuring.job import run_structure
from tests.conftest import own_ray_workers
from tests.test_progress import progress_lines


@pytest.fixture
def every_half_second():
    set_progress_every(0.5)
    yield
    set_progress_every(DEFAULT_EVERY_S)


def structure_40(tmp_path, corpus, server, **more):
    """40 documents in 2 shards of 20 on 2 Ray workers, 2 requests in flight each: ~10 s per shard at 1 s a reply."""
    cfg = load_structure_config(
        None,
        corpus=str(corpus),
        out=str(tmp_path / "o"),
        backend="llm",
        limit=40,
        shard_docs=20,
        workers=2,
        progress=True,
        llm_base_url=server.base_url,
        llm_concurrency=2,
        **more,
    )
    return run_structure(cfg)


def counts(err: str) -> list[int]:
    lines = progress_lines(err, "structure[llm]")
    assert all(m["total"] == "40" and m["unit"] == "docs" for m in lines), err
    return [int(m["done"]) for m in lines]


def test_the_line_counts_documents_within_a_shard(tmp_path, sample_path, ray_local, every_half_second, capfd):
    with FakeLLMServer(latency_ms=1000) as server:
        stats = structure_40(tmp_path, sample_path, server)
    err = capfd.readouterr().err
    seen = counts(err)
    assert stats["docs_total"] == 40
    assert any(0 < n < 40 for n in seen[:-1]), err  # on main: 0/40 until both shards end at once, then 40/40
    assert seen == sorted(seen) and seen[-1] == 40, err  # never backwards; the last line is the real count
    moving = [line for line in err.splitlines() if "structure[llm]: " in line and "/40 docs" in line]
    assert all("docs/s ETA" in line and " retries=" in line and " 429s=" in line for line in moving), err
    assert all("$" in line for line in moving), err


def test_a_shard_redone_after_its_worker_died_is_not_counted_twice(
    tmp_path, sample_path, ray_local, every_half_second, capfd
):
    """One worker killed once part of its shard is checkpointed: the shard runs again on a new worker, skipping
    the checkpointed documents and redoing the others; its counts start from zero there and must not add up."""
    killed: list[int] = []
    out = tmp_path / "o"

    def killer() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if list((out / "checkpoint").glob("**/*.parquet")):
                for worker in own_ray_workers("StructureWorker"):
                    try:
                        worker.kill()
                    except psutil.Error:
                        continue
                    killed.append(worker.pid)
                    return
            time.sleep(0.05)

    with FakeLLMServer(latency_ms=1000) as server:
        t = threading.Thread(target=killer, daemon=True)
        t.start()
        stats = structure_40(tmp_path, sample_path, server, flush_docs=4)
        t.join(timeout=5)
    err = capfd.readouterr().err
    assert killed, "no worker was killed: the test did not redo a shard"
    seen = counts(err)
    assert stats["docs_total"] == 40
    assert all(n <= 40 for n in seen) and seen[-1] == 40, err
