"""Storage that cannot be reached ends a command in one line naming the URI and the endpoint: exit 75 when it may
come back (connection refused), exit 2 when the configuration is wrong (refused credentials, an endpoint that does
not resolve), never pyarrow's OSError traceback. Real `rise-batch` processes against the real S3 server (tests/s3.py)
and against a loopback port nothing listens on."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rise_batch.cli import main
from rise_batch.storage_errors import storage_failure
from tests.commands.test_help import ROOT
from tests.conftest import SAMPLE


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def retrieval(tmp_path_factory) -> Path:
    """An eval-retrieval result (a report input) over an index of the sample corpus."""
    root = tmp_path_factory.mktemp("unreachable")
    assert main(["index", "--corpus", str(SAMPLE), "--out", str(root / "index"), "--no-progress"]) == 0
    er = ["eval-retrieval", "--index", str(root / "index"), "--queries", str(ROOT / "jobs" / "queries_demo.jsonl")]
    assert main([*er, "--out", str(root / "er.json")]) == 0
    return root


def rise_batch(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rise_batch.cli", *args],
        capture_output=True, text=True, timeout=300, cwd=cwd, env=os.environ | env,
    )  # fmt: skip


def one_line(r: subprocess.CompletedProcess) -> str:
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    return lines[0]


def test_a_report_into_a_bucket_nothing_answers_for_is_exit_75_naming_uri_and_endpoint(retrieval, tmp_path):
    endpoint = f"http://127.0.0.1:{closed_port()}"
    env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
    r = rise_batch(["report", "--retrieval", str(retrieval / "er.json"), "--out", "s3://rise/rep"], tmp_path, **env)
    line = one_line(r)
    assert r.returncode == 75 and "s3://rise/rep" in line and endpoint in line, line
    # reading: a query file in the unreachable bucket, the same line and code
    er = ["eval-retrieval", "--index", str(retrieval / "index"), "--queries", "s3://rise/q.jsonl"]
    r = rise_batch(er, tmp_path, **env)
    line = one_line(r)
    assert r.returncode == 75 and "s3://rise/q.jsonl" in line and endpoint in line, line
    assert not any(p.name.startswith("s3:") for p in tmp_path.rglob("*"))


def test_refused_credentials_and_an_unknown_host_are_exit_2(s3, retrieval, tmp_path):
    out = s3.uri("rep")
    report = ["report", "--retrieval", str(retrieval / "er.json"), "--out", out]
    r = rise_batch(report, tmp_path, AWS_SECRET_ACCESS_KEY="wrong")
    line = one_line(r)
    assert r.returncode == 2 and out in line and s3.endpoint in line and "AWS_SECRET_ACCESS_KEY" in line, line
    r = rise_batch(report, tmp_path, AWS_ACCESS_KEY_ID="nobody")
    line = one_line(r)
    assert r.returncode == 2 and out in line and "AWS_ACCESS_KEY_ID" in line, line
    r = rise_batch(report, tmp_path, AWS_ENDPOINT_URL="http://no-such-host.invalid:9000")
    line = one_line(r)
    assert r.returncode == 2 and out in line and "no-such-host.invalid" in line, line
    # and with the right credentials the same command writes into the bucket
    r = rise_batch(report, tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.mark.parametrize(
    ("message", "transient", "names"),
    [  # pyarrow's S3 messages for what the test server cannot be made to answer
        (
            "When getting information for bucket 'gone': AWS Error NO_SUCH_BUCKET during HeadBucket operation: "
            "The specified bucket does not exist",
            False,
            ("s3://gone", "no such bucket"),
        ),
        (
            "When reading information for key 'a/b.json' in bucket 'bk': AWS Error UNKNOWN (HTTP status 503) during "
            "HeadObject operation: No response body.",
            True,
            ("s3://bk/a/b.json", "cannot be reached"),
        ),
        (
            "When listing objects under key 'p/' in bucket 'bk': AWS Error NETWORK_CONNECTION during ListObjectsV2 "
            "operation: curlCode: 28, Timeout was reached",
            True,
            ("s3://bk/p", "Timeout was reached"),
        ),
    ],
)
def test_what_other_storage_answers_is_classified(message, transient, names, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://store.example:9000")
    failure = storage_failure(OSError(message))
    assert failure is not None and failure.transient is transient
    assert all(n in failure.message for n in names) and "http://store.example:9000" in failure.message
    assert storage_failure(OSError("[Errno 28] No space left on device")) is None
