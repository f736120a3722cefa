"""`rise-batch fake-llm`'s flags are made from ServeOptions' and FaultConfig's fields, and the server defaults to
those same fields; building the CLI's parser reads them without importing the server."""

from __future__ import annotations

import inspect
import subprocess
import sys

from rise_batch.fake_llm.chat import default_responders
from rise_batch.fake_llm.http import ConnectionLimits
from rise_batch.fake_llm.serve_options import ServeOptions
from rise_batch.fake_llm.server import MAX_BODY_BYTES, FakeLLMServer
from tests.conftest import REPO


def test_the_server_defaults_to_the_fields_its_flags_show() -> None:
    limits, o = ConnectionLimits(), ServeOptions()
    assert (limits.header_timeout_s, limits.body_timeout_s, limits.idle_timeout_s) == (
        o.header_timeout_s,
        o.body_timeout_s,
        o.idle_timeout_s,
    )
    assert limits.max_buffered_bytes == o.max_buffered_bytes and MAX_BODY_BYTES == o.max_body_bytes
    params = inspect.signature(FakeLLMServer).parameters
    assert (params["host"].default, params["engine"].default) == (o.host, o.engine)
    assert inspect.signature(default_responders).parameters["judge_reply"].default == o.judge_reply


def test_the_fake_llm_parser_does_not_import_the_server() -> None:
    """`rise-batch --help` builds every parser; the fake server's modules (~0.4 s) load only when it runs."""
    code = (
        "import sys; from rise_batch.cli import build_parser; build_parser(); "
        "print(sorted(m for m in sys.modules if m.startswith('rise_batch.fake_llm.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert "rise_batch.fake_llm.server" not in out.stdout, out.stdout
    assert "rise_batch.fake_llm.faults" in out.stdout  # its fields are the fault flags


def test_a_port_in_use_is_one_line_and_exit_2() -> None:
    """A port another process holds is the user's setting to change: one line naming it, exit 2, no traceback."""
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        for engine in ("asyncio", "threads"):
            cmd = [sys.executable, "-m", "rise_batch.cli", "fake-llm", "--port", str(port), "--engine", engine]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            assert done.returncode == 2, (engine, done.stderr[-1000:])
            assert "Traceback" not in done.stderr and f"127.0.0.1:{port}" in done.stderr, done.stderr
            assert len(done.stderr.strip().splitlines()) == 1, done.stderr
