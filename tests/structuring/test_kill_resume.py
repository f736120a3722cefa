"""SIGKILL a real `rise-batch structure --backend llm` process at several points, re-run, compare.

The fake server is the only stand-in (it plays the model); the job runs as a real subprocess, writing real
Parquet. Asserted: the final checkpoint and structured files equal an uninterrupted run's, and no document whose
reply was already checkpointed is ever sent to the server again.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from rise_batch.fake_llm import FakeLLMServer
from rise_batch.structuring.checkpoint import CheckpointStore
from tests.conftest import sample_rows

OUTPUT_FIELDS = (
    "docid",
    "content_hash",
    "run_hash",
    "outcome",
    "sections_json",
    "anchors_proposed",
    "anchors_exact",
    "anchors_normalized",
    "anchors_prefix",
    "tier",
    "error",
)
N_DOCS = 60


def doc_key(text: str) -> str:
    """The fake server's request key for a structuring request: a hash of the document it carries."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def write_config(path: Path, corpus: Path, out: Path, base_url: str) -> Path:
    cfg = {
        "corpus": str(corpus),
        "out": str(out),
        "backend": "llm",
        "limit": N_DOCS,
        "shard_docs": 20,
        "flush_docs": 4,
        "workers": 0,
        "progress": False,
        "llm": {"base_url": base_url, "concurrency": 4, "rpm": 100000, "tpm": 100000000},
    }
    path.write_text(yaml.safe_dump(cfg))
    return path


def start(config: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "rise_batch.cli", "structure", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=os.environ | {"OPENAI_API_KEY": ""},
    )


def outputs(out: Path) -> tuple[list[tuple], dict[str, bytes]]:
    rows = sorted(tuple(getattr(r, f) for f in OUTPUT_FIELDS) for r in CheckpointStore(out).read_rows())
    files = {str(p.relative_to(out)): p.read_bytes() for p in sorted((out / "corpus").rglob("*.txt"))}
    return rows, files


def test_sigkill_at_any_point_then_rerun_equals_uninterrupted(tmp_path, sample_path):
    keys = {r["docid"]: doc_key(r["text"]) for r in sample_rows(N_DOCS)}
    with FakeLLMServer(latency_ms=15) as server:
        ref = start(write_config(tmp_path / "ref.yaml", sample_path, tmp_path / "ref", server.base_url))
        assert ref.wait(timeout=300) == 0, ref.stderr.read().decode()
        expected = outputs(tmp_path / "ref")
        assert len(expected[0]) == N_DOCS

        out = tmp_path / "killed"
        config = write_config(tmp_path / "k.yaml", sample_path, out, server.base_url)
        # kill points: during start-up/scan (no request yet), then after n requests of the run
        for kill_at in (0, 5, 23, 41):
            mark = len(server.log())
            proc = start(config)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and proc.poll() is None:
                if kill_at == 0 and (out / "manifest.json").exists() or kill_at and len(server.log()) - mark >= kill_at:
                    break
                time.sleep(0.005)
            assert proc.poll() is None, "the job finished before the kill point"
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            done = {r.docid for r in CheckpointStore(out).read_rows()}
            after_kill = len(server.log())
            resumed = start(config)
            assert resumed.wait(timeout=300) == 0, resumed.stderr.read().decode()
            done_keys = {keys[d] for d in done}
            resent = [e for e in server.log(after_kill) if e.get("key") in done_keys]
            assert resent == [], f"checkpointed documents were sent again after a kill at {kill_at}"
            import shutil

            assert outputs(out) == expected
            shutil.rmtree(out)  # next kill point starts from scratch
