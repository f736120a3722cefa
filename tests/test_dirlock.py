"""One writer per output directory (rise_batch/dirlock.py), with real commands: `rise-batch structure` and
`rise-batch index` subprocesses against a directory this test process holds, and the lease of object storage
against the real S3 server (tests/s3.py). The two-`run` case, `judge` against a `run` and a SIGKILLed holder are in
tests/agent/test_one_writer.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rise_batch import dirlock
from rise_batch.dirlock import LEASE_FILE, LOCK_FILE, claim, holder_record, holding, process_identity
from rise_batch.storage import location
from tests.cli import cli
from tests.conftest import SAMPLE

HERE = f"pid {os.getpid()} on host {socket.gethostname()}"


def structure(out: str) -> list[str]:
    return ["structure", "--corpus", str(SAMPLE), "--out", out, "--limit", "8", "--workers", "0", "--no-progress"]


def refused(done, holder: str) -> str:
    """The one line a refused command printed, checked: exit 2, the holder named, the remedy given."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert holder in lines[0] and "one command writes a directory at a time" in lines[0], lines[0]
    return lines[0]


def test_structure_and_index_refuse_a_directory_another_process_writes(tmp_path: Path) -> None:
    out, index = tmp_path / "out", tmp_path / "idx"

    @holding("rise-batch test")
    def while_held() -> None:
        claim(out)
        claim(index, beside=True)  # an index's lock is beside it: the directory is replaced whole when published
        assert json.loads((out / LOCK_FILE).read_text())["pid"] == os.getpid()
        refused(cli(*structure(str(out)), timeout=120), HERE)
        line = refused(cli("index", "--corpus", str(SAMPLE), "--out", str(index), timeout=120), HERE)
        assert "`rise-batch test`" in line
        assert not index.exists() and not (out / "manifest.json").exists()  # nothing written by the refused ones

    while_held()
    assert (out / LOCK_FILE).read_text() == ""  # released with the scope: emptied, left in place
    assert cli(*structure(str(out)), timeout=300).returncode == 0
    assert cli("index", "--corpus", str(SAMPLE), "--out", str(index), timeout=300).returncode == 0
    assert (index / "meta.json").is_file() and not any(index.glob(".*lock"))


def test_a_command_that_fails_early_leaves_no_directory_behind(tmp_path: Path) -> None:
    """The lock file is emptied when released, so a failed command's new directory is still removed."""
    done = cli("structure", "--corpus", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "new"), timeout=120)
    assert done.returncode == 2 and not (tmp_path / "new").exists(), done.stderr


def lease_of(uri: str) -> dict:
    return json.loads((location(uri) / LEASE_FILE).read_bytes())


def test_a_live_lease_refuses_a_writer_and_an_expired_one_is_taken_over(s3) -> None:
    uri = s3.uri()
    other = {"host": "node-b", "pid": 4242, "command": "rise-batch structure", "since": "x", "token": "t"}
    (location(uri) / LEASE_FILE).write_bytes(json.dumps(other | {"expires": time.time() + 3600}).encode())
    line = refused(cli(*structure(uri), timeout=120), "pid 4242 on host node-b")
    assert "its lease runs until" in line and "taken over" in line

    (location(uri) / LEASE_FILE).write_bytes(json.dumps(other | {"expires": time.time() - 1}).encode())
    done = cli(*structure(uri), timeout=300)  # its holder was killed: the lease expired, the directory is free
    assert done.returncode == 0, done.stderr
    assert not (location(uri) / LEASE_FILE).exists()  # released: the lease object is deleted
    assert (location(uri) / "stats.json").exists()

    @holding("rise-batch test")
    def while_held() -> None:
        claim(uri)
        assert lease_of(uri)["pid"] == os.getpid()
        refused(cli(*structure(uri), timeout=120), HERE)

    while_held()
    assert not (location(uri) / LEASE_FILE).exists()


def test_the_lease_of_a_killed_holder_on_this_machine_is_taken_over_at_once(s3) -> None:
    """A lease whose holder ran here and no longer runs is not waited out (a SIGKILLed command resumed on the same
    machine); one of a live process here, or of a process elsewhere, is (tests above)."""
    uri = s3.uri()
    gone = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    record = holder_record("rise-batch structure") | process_identity(gone.pid) | {"pid": gone.pid, "token": "t"}
    (location(uri) / LEASE_FILE).write_bytes(json.dumps(record | {"expires": time.time() + 3600}).encode())
    refused(cli(*structure(uri), timeout=120), f"pid {gone.pid} on host {socket.gethostname()}")
    gone.kill()
    gone.wait()
    done = cli(*structure(uri), timeout=300)
    assert done.returncode == 0, done.stderr


def test_the_holder_renews_its_lease_until_it_ends(s3, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dirlock, "LEASE_TTL_S", 0.9)  # renewed every 0.3 s
    uri = s3.uri()

    @holding("rise-batch test")
    def while_held() -> None:
        claim(uri)
        first = lease_of(uri)["expires"]
        deadline = time.monotonic() + 60
        while lease_of(uri)["expires"] == first and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lease_of(uri)["expires"] > first, "the lease was never renewed"

    while_held()
    assert not (location(uri) / LEASE_FILE).exists()
