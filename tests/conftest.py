"""Shared fixtures: small real corpora written to disk in the formats users bring."""

from __future__ import annotations

import gzip
import json
import os
import sys
from pathlib import Path

import pytest

from tests.real_parts import ENV, SKIPPED, allowed_skips, require

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "rise_batch" / "data" / "enwiki_sample.jsonl.gz"
SHARED_DATA = REPO.parent / "shared" / "data"  # the data sets beside the checkout (see its README)


def shared_data(relpath: str) -> Path:
    """A file of the shared data sets, found relative to the checkout.

    Where `../shared/data` exists (this workplace and its CI), a missing file fails the test rather than skipping
    it, so a moved or renamed data set cannot silently turn a real check into a skip; on a machine without the
    shared folder at all the test is skipped.
    """
    path = SHARED_DATA / relpath
    if not SHARED_DATA.is_dir():
        pytest.skip(f"no shared data folder beside the checkout ({SHARED_DATA})")
    if not path.exists():
        pytest.fail(f"{path} is missing from the shared data folder")
    return path


def sample_rows(n: int | None = None) -> list[dict]:
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    return rows[:n] if n else rows


def write_jsonl(path: Path, rows: list[dict], gz: bool = False) -> Path:
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def write_parquet(path: Path, rows: list[dict], row_group_size: int | None = None) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=row_group_size)
    return path


@pytest.fixture(scope="session")
def sample_path() -> Path:
    return SAMPLE


def own_ray_workers(actor: str) -> list:
    """This test process's Ray workers running `actor` (descendants of this process: its private local Ray, never
    another cluster's). A worker that exits while it is looked at is skipped."""
    import psutil

    found = []
    for p in psutil.Process(os.getpid()).children(recursive=True):
        try:
            if actor in " ".join(p.cmdline()):
                found.append(p)
        except psutil.Error:
            continue
    return found


def _ray_up() -> bool:
    ray = sys.modules.get("ray")  # never imported here: most tests never touch Ray
    return ray is not None and ray.is_initialized()


@pytest.fixture(autouse=True)
def no_ray_left_behind(request):
    """A Ray that a command run in-process started is shut down when its test ends.

    Left up, the session's `ray_local` would find it and reuse it: its workers take the cwd that test chdir'd to
    (a tmp directory) as their first import path, so every later task that imports `tests` failed in CI."""
    before = _ray_up()
    yield
    if not before and _ray_up() and "ray_local" not in request.fixturenames:
        from rise_batch.executor.ray import stop_local_ray

        stop_local_ray()


@pytest.fixture(scope="session")
def ray_local():
    """One real local Ray for the whole session (2 CPUs, like CI): starting Ray costs 10-20 s, so tests share it.

    Always its own: a Ray some test left up (other CPUs, another cwd on its workers' import path) is replaced."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=2, include_dashboard=False)  # never a `ray start` cluster of this machine
    yield
    ray.shutdown()


@pytest.fixture(scope="session")
def two_nodes():
    """A real 2-node Ray cluster (tests/two_nodes.py), shared by the session's cluster tests; a test that kills
    node B calls `restart_b()` when it is done."""
    from tests.two_nodes import TwoNodes, can_run

    require("two-nodes", can_run())
    cluster = TwoNodes()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def s3():
    """A real S3 server (SeaweedFS, tests/s3.py) for the session, its credentials and endpoint in this process's
    environment (as a user exports them; subprocesses and Ray workers inherit them) while it runs."""
    import os

    from tests.s3 import S3Server, can_run

    require("s3", can_run())
    server = S3Server()
    saved = {k: os.environ.get(k) for k in server.env}
    os.environ.update(server.env)
    try:
        yield server
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()


def pytest_configure(config: pytest.Config) -> None:
    allowed_skips()  # an unknown name in RISE_BATCH_TEST_SKIP stops the session before any test runs


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """Say which real parts were skipped because RISE_BATCH_TEST_SKIP asked, so a green run cannot hide them."""
    if SKIPPED:
        terminalreporter.section(f"real parts skipped on purpose ({ENV})")
        for part, why in sorted(SKIPPED.items()):
            terminalreporter.write_line(f"{part}: {why}")
