"""The fake server's thread engine: the standard library's ThreadingHTTPServer, one thread per connection.

Kept beside the asyncio engine (`--engine threads`) as the reference it is compared with: a wait (latency, a hang)
is a thread sleeping on the server's stop event, so every open request holds a thread.
"""

from __future__ import annotations

import functools
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from rise_batch.fake_llm.http import Dispatcher, HttpRequest, busy, refuse_body, timed_out
from rise_batch.llm.simulated import SIMULATED_HEADER


class ThreadEngine:
    """Binds at construction (so the port is known), serves on a background thread from `start()`."""

    def __init__(self, fake: Dispatcher, host: str, port: int) -> None:
        self._httpd = _HTTPServer((host, port), _Handler)
        self._httpd.fake = fake
        self.port: int = self._httpd.server_address[1]
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        serve = functools.partial(self._httpd.serve_forever, poll_interval=0.05)  # a short poll: stop() is quick
        self._thread = threading.Thread(target=serve, name="fake-llm", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Called after the server's stop event is set: sleeping handlers wake and answer 503."""
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
            self._thread = None
        self._httpd.server_close()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # hung handlers end with the stop event, never block shutdown
    request_queue_size = 1024
    fake: Dispatcher


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: clients reuse connections as they do with the real API
    disable_nagle_algorithm = True  # headers and body go out without waiting for delayed ACKs
    server: _HTTPServer

    def handle_one_request(self) -> None:
        """The connection limits (http.ConnectionLimits) as socket timeouts: the first byte of a request within the
        idle timeout (else the connection is closed), then each read of its head within the header timeout
        (http.server closes the connection on a timeout); the body has its own deadline (`_read_body`)."""
        limits = self.server.fake.limits
        try:
            self.connection.settimeout(limits.idle_timeout_s)
            if not self.rfile.peek(1):
                self.close_connection = True
                return
            self.connection.settimeout(limits.header_timeout_s)
        except (TimeoutError, OSError):
            self.close_connection = True
            return
        super().handle_one_request()

    def _serve(self) -> None:
        split = urlsplit(self.path)
        fake = self.server.fake
        response = refuse_body(self.headers.get("Content-Length"), fake.max_body_bytes)
        if response is None:
            length = int(self.headers.get("Content-Length") or 0)
            if not fake.budget.reserve(length):  # answered unread: the bytes held across connections stay bounded
                response = busy(fake.budget, length)
            else:
                try:
                    body = self._read_body(length, fake.limits.body_timeout_s)
                    if body is None:
                        response = timed_out("body", fake.limits.body_timeout_s)
                    else:
                        request = HttpRequest(
                            self.command, split.path, dict(parse_qsl(split.query)), self.headers, body
                        )
                        del body
                        response = fake.dispatch(request)
                        del request
                finally:
                    fake.budget.release(length)
        self.close_connection = self.close_connection or response.headers.get("Connection") == "close"
        try:
            self.connection.settimeout(fake.limits.body_timeout_s)  # a client that does not take its reply
            self.send_response(response.status)
            self.send_header("Content-Type", response.content_type)
            self.send_header("Content-Length", str(len(response.body)))
            self.send_header(SIMULATED_HEADER, "fake-llm")  # costs priced from these replies are not real money
            for name, value in response.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(response.body)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):  # the client gave up (timeout on a hang)
            self.close_connection = True

    def _read_body(self, length: int, timeout_s: float) -> bytes | None:
        """`length` bytes of body within `timeout_s` in all (not per read: a client trickling a byte at a time is cut
        off too); None when the deadline passes or the client goes away."""
        deadline = time.monotonic() + timeout_s
        chunks, got = [], 0
        while got < length:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                self.connection.settimeout(left)
                chunk = self.rfile.read1(min(length - got, 2**20))
            except (TimeoutError, OSError):
                return None
            if not chunk:
                return None
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    do_GET = do_POST = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:  # the request log replaces stderr chatter
        pass
