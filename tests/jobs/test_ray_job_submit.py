"""A structure job submitted with `ray job submit` to a real `ray start --head`, against the fake server.

What a user does on a cluster, on one machine: start a head node, submit `jobs/structure_corpus.py` with the repo
as the working dir, read the outputs; submit again and nothing is re-sent. The head gets its own temp dir and
ports and is torn down by stopping its `ray start --block` process (never `ray stop`, which would stop every Ray
on the machine).

Ray >= 2.5x starts a head with token authentication on. The head and the client must then agree on a token:
here both get RAY_AUTH_MODE=token and the same RAY_AUTH_TOKEN (a user on the head node can instead rely on
~/.ray/auth_token, which `ray start` creates, but the client still needs RAY_AUTH_MODE=token or it is refused).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from rise_batch.fake_llm import FakeLLMServer
from rise_batch.structuring.checkpoint import CheckpointStore
from rise_batch.types import OUTCOMES
from tests.real_parts import require
from tests.two_nodes import free_ports

ROOT = Path(__file__).resolve().parents[2]
RAY = shutil.which("ray")
N_DOCS = 24

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _ray_cli() -> None:
    require("ray-cli", None if RAY else "the `ray` CLI is not installed (pip install 'ray[default]')")


def ray_env(token: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS")}
    return env | {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token, "RAY_USAGE_STATS_ENABLED": "0"}


class Head:
    def __init__(self, proc: subprocess.Popen, dashboard: str, env: dict[str, str], temp_dir: str) -> None:
        self.proc, self.dashboard, self.env, self.temp_dir = proc, dashboard, env, temp_dir

    def submit(self, config: Path) -> subprocess.CompletedProcess:
        cmd = [RAY, "job", "submit", "--address", self.dashboard, "--working-dir", "."]
        cmd += ["--", "python", "jobs/structure_corpus.py", "--config", str(config)]
        return subprocess.run(cmd, cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def head() -> Iterator[Head]:
    temp_dir = tempfile.mkdtemp(prefix="rjs", dir="/tmp")  # short: Ray's socket paths live under it
    names = ["port", "dashboard-port", "ray-client-server-port", "node-manager-port", "object-manager-port"]
    names += ["dashboard-agent-listen-port", "dashboard-agent-grpc-port", "runtime-env-agent-port"]
    names += ["metrics-export-port"]
    ports = dict(zip(names, free_ports(len(names)), strict=True))
    cmd = [RAY, "start", "--head", "--block", f"--temp-dir={temp_dir}", "--num-cpus=2", "--disable-usage-stats"]
    cmd += ["--include-dashboard=true", "--dashboard-host=127.0.0.1"]
    cmd += [f"--{name}={port}" for name, port in ports.items()]
    env = ray_env(uuid.uuid4().hex)
    log = open(Path(temp_dir) / "ray_start.log", "w")  # noqa: SIM115 - closed at teardown
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    dashboard = f"http://127.0.0.1:{ports['dashboard-port']}"
    try:
        _wait_for_dashboard(dashboard, proc, temp_dir)
        yield Head(proc, dashboard, env, temp_dir)
    finally:
        stop_head(proc)
        log.close()
        shutil.rmtree(temp_dir, ignore_errors=True)


def stop_head(proc: subprocess.Popen) -> None:
    """Stop a `ray start --head --block` and only it: SIGTERM stops the processes it started (SIGKILL its group
    after a minute); never `ray stop`, which would stop every Ray on the machine."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _wait_for_dashboard(url: str, proc: subprocess.Popen, temp_dir: str) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("ray start --head exited:\n" + (Path(temp_dir) / "ray_start.log").read_text()[-3000:])
        try:
            urllib.request.urlopen(url + "/api/version", timeout=2)
            return
        except urllib.error.HTTPError:  # answered (401 without a token): it is up
            return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("the Ray dashboard (job server) did not come up in 180 s")


def write_config(path: Path, out: Path, base_url: str) -> Path:
    cfg = {
        "structure": {
            "corpus": str(ROOT / "rise_batch" / "data" / "enwiki_sample.jsonl.gz"),
            "out": str(out),
            "backend": "llm",
            "limit": N_DOCS,
            "shard_docs": 8,
            "workers": 2,
            "progress": False,
            "llm": {"base_url": base_url, "concurrency": 4, "rpm": 100_000, "tpm": 100_000_000},
        }
    }
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_structure_job_through_ray_job_submit_then_resume(head: Head, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with FakeLLMServer() as server:
        config = write_config(tmp_path / "job.yaml", out, server.base_url)
        done = head.submit(config)
        assert done.returncode == 0 and "succeeded" in done.stdout, done.stdout[-4000:] + done.stderr[-4000:]
        requests = server.stats()["requests"]

        stats = json.loads((out / "stats.json").read_text())
        assert stats["docs_total"] == N_DOCS and stats["backend"] == "llm"
        assert sum(stats["outcomes"].values()) == N_DOCS and stats["docs_with_toc"] > 0
        assert stats["transport"]["attempts"] == requests == stats["llm_calls"] > 0
        rows = CheckpointStore(out).read_rows()
        assert len(rows) == len({r.docid for r in rows}) == N_DOCS
        assert all(r.outcome in OUTCOMES and r.tier == "llm" for r in rows)
        files = sorted((out / "corpus").rglob("*.txt"))
        assert len(files) == N_DOCS
        assert any("## Table of Contents\n" in f.read_text() for f in files)
        assert "structure docs_total=24" in done.stdout  # the job's summary line reaches the submitter's log

        again = head.submit(config)  # resume: everything is checkpointed, nothing is sent
        assert again.returncode == 0 and "succeeded" in again.stdout, again.stdout[-4000:]
        assert server.stats()["requests"] == requests
    assert json.loads((out / "stats.json").read_text())["docs_total"] == N_DOCS
