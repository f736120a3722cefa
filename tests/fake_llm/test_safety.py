"""The fake server left running on a shared machine: settings change over HTTP only when allowed at start, request
bodies are bounded, and a NaN, infinite or out-of-range setting is refused (constructor, `_config` and CLI)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from http.client import HTTPConnection

import pytest

from rise_batch.fake_llm import FakeLLMServer, FaultConfig
from tests.fake_llm.test_server import chat_body, http

BAD_SETTINGS = [
    {"latency_ms": math.nan},
    {"latency_jitter_ms": math.inf},
    {"hang_s": math.inf},
    {"retry_after_ms": math.nan},
    {"limit_window_s": math.nan},
    {"p429": math.nan},
    {"p500": -0.1},
    {"p_hang": 1.5},
    {"p429": True},
    {"seed": 1.5},
    {"rpm_limit": 2.5},
    {"max_faults_per_key": -1},
    {"require_key": 5},
]


@pytest.mark.parametrize("changes", BAD_SETTINGS, ids=lambda c: next(iter(c.items())).__repr__())
def test_bad_settings_are_refused_in_process_and_over_http(changes: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(changes))):
        FaultConfig(**changes)
    with FakeLLMServer(allow_config=True) as server:
        before = server.state.config
        body = json.dumps(changes).encode()  # json writes NaN / Infinity, which Python's json reads back
        status, reply, _ = http(server.base_url + "/_config", body, headers={"Content-Type": "application/json"})
        assert status == 400, reply
        assert next(iter(changes)) in reply["error"]["message"]
        assert server.state.config == before


@pytest.mark.parametrize("flag", [["--latency-ms", "nan"], ["--hang-s", "inf"], ["--limit-window-s", "nan"]])
def test_cli_refuses_non_finite_settings(flag: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "rise_batch.cli", "fake-llm", "--port", "0", *flag],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "finite" in proc.stderr and "Traceback" not in proc.stderr


def test_config_over_http_needs_the_flag() -> None:
    with FakeLLMServer() as server:
        for path, body in (("/_config", {"p500": 1.0}), ("/_batch_config", {"fail_rate": 1.0}), ("/_reset", {})):
            status, reply, _ = http(server.base_url + path, body)
            assert status == 403 and "--allow-config" in reply["error"]["message"], (path, reply)
        assert server.state.config.p500 == 0.0
        assert http(server.base_url + "/chat/completions", chat_body("Still answers."))[0] == 200
        assert http(server.base_url + "/_stats")[0] == 200  # reading stays open
        assert server.stats()["requests"] == 1  # the refused _reset did not wipe the counts


def _post_raw(host: str, port: int, path: str, headers: dict[str, str], body: bytes = b"") -> tuple[int, dict]:
    conn = HTTPConnection(host, port, timeout=10)
    try:
        conn.putrequest("POST", path)
        for name, value in headers.items():
            conn.putheader(name, value)
        conn.endheaders()
        if body:
            conn.send(body)
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def test_request_bodies_are_bounded() -> None:
    with FakeLLMServer(max_body_bytes=10_000) as server:
        # a client announcing 10 GB gets its 413 at once: the server does not wait for (or buffer) the body
        status, reply = _post_raw(server.host, server.port, "/v1/chat/completions", {"Content-Length": str(10**10)})
        assert status == 413 and "10000" in reply["error"]["message"]
        big = json.dumps(chat_body("x " * 20_000)).encode()
        status, reply, _ = http(server.base_url + "/chat/completions", big)
        assert status == 413
        status, reply = _post_raw(server.host, server.port, "/v1/chat/completions", {"Content-Length": "-5"})
        assert status == 400 and "Content-Length" in reply["error"]["message"]
        assert http(server.base_url + "/chat/completions", chat_body("Small enough."))[0] == 200
        assert server.stats()["requests"] == 1
    with pytest.raises(ValueError, match="max_body_bytes"):
        FakeLLMServer(max_body_bytes=0)


def test_cli_allow_config_flag() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "rise_batch.cli", "fake-llm", "--port", "0", "--allow-config"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        base = proc.stdout.readline().split()[3]
        status, cfg, _ = http(base + "/_config", {"p500": 1.0})
        assert status == 200 and cfg["p500"] == 1.0
        assert http(base + "/chat/completions", chat_body("A doc."))[0] == 500
    finally:
        proc.terminate()
        proc.wait(timeout=20)
