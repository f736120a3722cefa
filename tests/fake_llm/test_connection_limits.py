"""The fake server is safe to leave running, on both engines, seen through real sockets: clients that stall
mid-body, mid-head or between requests are cut off after the (here short) timeouts, the bodies held across
connections stay under the cap, and a lone surrogate in a message does not break the request log.

The flood runs against `rise-batch fake-llm` in its own process, so its memory is measured alone. Time limits are
generous: only a connection that is never closed fails them.
"""

from __future__ import annotations

import re
import socket
import threading
import time
import urllib.request
from urllib.parse import urlsplit

import psutil
import pytest

from rise_batch.fake_llm import FakeLLMServer
from rise_batch.fake_llm.http import ConnectionLimits
from tests.fake_llm.helpers import cli_server
from tests.fake_llm.test_server import http

ENGINES = ["asyncio", "threads"]
MB = 10**6
SHORT = ConnectionLimits(header_timeout_s=1.0, body_timeout_s=1.0, idle_timeout_s=1.0)
HANG = 60.0  # a connection still open after this was never going to be closed


def _stall_mid_body(port: int, declared: int, send: int, closed: list[float | None]) -> None:
    """POST a body of `declared` bytes, send `send` of them, then wait for the server to close the connection."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=HANG) as sock:
            head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {declared}\r\n\r\n"
            sock.sendall(head.encode())
            chunk = b"x" * 2**20
            try:
                for _ in range(send // len(chunk)):
                    sock.sendall(chunk)
            except OSError:  # refused unread (503) and closed while we were still sending
                closed.append(time.monotonic())
                return
            while sock.recv(65536):  # the 408, then the end of the connection
                pass
            closed.append(time.monotonic())
    except TimeoutError:
        closed.append(None)  # never closed
    except OSError:
        closed.append(time.monotonic())  # reset by the server: closed


@pytest.mark.parametrize("engine", ENGINES)
def test_six_stalled_250_mb_uploads_hold_bounded_memory_and_are_closed(engine: str) -> None:
    """Six connections each send 100 MB of a declared 250 MB body and stall. Before: the server's RSS grew by
    ~600 MB and every connection stayed open until its client closed it."""
    cap = 256 * 2**20  # the bodies held across connections: one such upload at a time
    flags = ["--engine", engine, "--body-timeout-s", "2", "--max-buffered-bytes", str(cap)]
    with cli_server(*flags) as (proc, base):
        port = urlsplit(base).port
        assert port is not None
        server = psutil.Process(proc.pid)
        before = server.memory_info().rss
        peak, closed = before, []  # type: ignore[var-annotated]
        clients = [
            threading.Thread(target=_stall_mid_body, args=(port, 250 * MB, 100 * MB, closed), daemon=True)
            for _ in range(6)
        ]
        for c in clients:
            c.start()
        while any(c.is_alive() for c in clients):
            peak = max(peak, server.memory_info().rss)
            time.sleep(0.02)
        assert len(closed) == 6 and None not in closed, "a stalled connection was never closed"
        assert peak - before < cap + 64 * 2**20, f"RSS grew by {(peak - before) / MB:.0f} MB"
        status, stats, _ = http(f"{base}/_stats")  # and it still serves
        assert status == 200 and stats["requests"] == 0


def _closed_after(port: int, data: bytes) -> bytes:
    """Send `data` and read until the server closes the connection; what it sent back."""
    with socket.create_connection(("127.0.0.1", port), timeout=HANG) as sock:
        sock.sendall(data)
        got = b""
        while chunk := sock.recv(65536):
            got += chunk
        return got


@pytest.mark.parametrize("engine", ENGINES)
def test_idle_and_slow_connections_are_closed(engine: str) -> None:
    with FakeLLMServer(engine=engine, limits=SHORT) as server:
        assert _closed_after(server.port, b"") == b""  # idle: closed quietly (before: never)
        slow_head = _closed_after(server.port, b"POST /v1/chat/completions HTTP/1.1\r\nContent-Le")
        slow_body = _closed_after(server.port, b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{")
        assert b" 408 " in slow_body.split(b"\r\n")[0] and b"did not arrive within 1 s" in slow_body
        if engine == "asyncio":  # http.server (threads) closes a timed-out head without an answer
            assert b" 408 " in slow_head.split(b"\r\n")[0]
        status, _, _ = http(f"{server.base_url}/_stats")  # a request in time is served as before
        assert status == 200


@pytest.mark.parametrize("engine", ENGINES)
def test_a_body_over_the_shared_cap_is_refused_unread(engine: str) -> None:
    limits = SHORT._replace(body_timeout_s=30.0, max_buffered_bytes=1000)
    with FakeLLMServer(engine=engine, max_body_bytes=1000, limits=limits) as server:
        # one connection holds 600 bytes of budget (its body not yet sent), the next asks for 600 more
        with socket.create_connection(("127.0.0.1", server.port), timeout=HANG) as holder:
            holder.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 600\r\n\r\n")
            time.sleep(0.5)  # let the server reserve it (the answer below is checked, not the time)
            reply = _closed_after(server.port, b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 600\r\n\r\n")
            assert b" 503 " in reply.split(b"\r\n")[0] and b"--max-buffered-bytes" in reply
        with pytest.raises(ValueError, match="max_buffered_bytes"):
            FakeLLMServer(engine=engine, max_body_bytes=1000, limits=limits._replace(max_buffered_bytes=999))


@pytest.mark.parametrize("engine", ENGINES)
def test_a_lone_surrogate_does_not_break_the_request_log(engine: str) -> None:
    """One message holding `\\ud800` (valid JSON, no valid UTF-8): before, every later GET /v1/_log was an empty
    reply for the rest of the server's life."""
    body = b'{"model": "gpt-5.4-nano", "messages": [{"role": "user", "content": "lone \\ud800 half"}]}'
    with FakeLLMServer(engine=engine) as server:
        request = urllib.request.Request(f"{server.base_url}/chat/completions", data=body, method="POST")
        with urllib.request.urlopen(request, timeout=HANG) as r:
            assert r.status == 200
        for _ in range(2):
            status, log, _ = http(f"{server.base_url}/_log")
            assert status == 200 and len(log["entries"]) == 1
        status, _, _ = http(f"{server.base_url}/_stats")
        assert status == 200


def test_the_cli_refuses_bad_limits() -> None:
    from tests.fake_llm.helpers import cli_refusal

    done = cli_refusal("--idle-timeout-s", "nan")
    assert done.returncode == 2 and re.search(r"idle_timeout_s must be a finite number", done.stderr)
