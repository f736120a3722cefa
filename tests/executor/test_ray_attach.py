"""Which Ray a command uses: its own local Ray without --ray-address, even when a `ray start` cluster runs on the
machine; the job's cluster when RAY_ADDRESS is set (what `ray job submit` does).

The other cluster is a real `ray start --head --block` with its own RAY_TMPDIR (where ray.init() looks for "the
last cluster started on this machine"), its own ports and token auth (ray >= 2.60), torn down by stopping that
process, never `ray stop`. Whether a command attached to it is read from the head's own session: every driver that
connects leaves a `python-core-driver-*.log` there.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.conftest import SAMPLE
from tests.jobs.test_ray_job_submit import free_ports, ray_env, stop_head
from tests.real_parts import require

RAY = shutil.which("ray")
pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _ray_cli() -> None:
    require("ray-cli", None if RAY else "the `ray` CLI is not installed (pip install 'ray[default]')")


class Cluster(NamedTuple):
    env: dict[str, str]  # RAY_TMPDIR and the auth token: a command run with it would find and could join the head
    gcs: str
    session_logs: Path

    def drivers(self) -> set[str]:
        return {p.name for p in self.session_logs.glob("python-core-driver-*.log")}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    root = tempfile.mkdtemp(prefix="rat", dir="/tmp")  # short: Ray's socket paths live under it
    names = ["port", "ray-client-server-port", "node-manager-port", "object-manager-port", "metrics-export-port"]
    names += ["dashboard-agent-listen-port", "dashboard-agent-grpc-port", "runtime-env-agent-port"]
    ports = dict(zip(names, free_ports(len(names)), strict=True))
    env = ray_env(uuid.uuid4().hex) | {"RAY_TMPDIR": root}
    cmd = [RAY, "start", "--head", "--block", f"--temp-dir={root}/ray", "--num-cpus=2", "--disable-usage-stats"]
    cmd += ["--include-dashboard=false"] + [f"--{name}={port}" for name, port in ports.items()]
    log = open(Path(root) / "ray_start.log", "w")  # noqa: SIM115 - closed at teardown
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        address_file = Path(root) / "ray" / "ray_current_cluster"
        deadline = time.monotonic() + 180
        while not (address_file.exists() and (Path(root) / "ray" / "session_latest" / "logs").is_dir()):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("ray start --head did not come up:\n" + (Path(root) / "ray_start.log").read_text())
            time.sleep(0.5)
        time.sleep(3)  # the GCS answers a moment after the address file is written
        session = (Path(root) / "ray" / "session_latest").resolve()
        yield Cluster(env, f"127.0.0.1:{ports['port']}", session / "logs")
    finally:
        stop_head(proc)
        log.close()
        shutil.rmtree(root, ignore_errors=True)


def structure_on_ray(out: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "rise_batch.cli", "structure", "--corpus", str(SAMPLE), "--out", str(out)]
    cmd += ["--backend", "heuristic", "--workers", "1", "--limit", "10", "--no-progress"]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


def test_without_an_address_a_command_starts_its_own_ray(cluster: Cluster, tmp_path: Path) -> None:
    before = cluster.drivers()
    proc = structure_on_ray(tmp_path / "out", cluster.env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "docs_total=10" in proc.stdout
    assert "Connecting to existing Ray cluster" not in proc.stderr
    assert cluster.drivers() == before, "the command joined the `ray start` cluster"
    # without the cluster's token the old fallback did not even run: it failed on the auth token
    no_token = {k: v for k, v in cluster.env.items() if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    proc = structure_on_ray(tmp_path / "out2", no_token)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert cluster.drivers() == before


def test_ray_address_attaches_to_that_cluster(cluster: Cluster, tmp_path: Path) -> None:
    before = cluster.drivers()
    proc = structure_on_ray(tmp_path / "out", cluster.env | {"RAY_ADDRESS": cluster.gcs})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "docs_total=10" in proc.stdout
    assert len(cluster.drivers() - before) == 1, "the command did not run on the RAY_ADDRESS cluster"
