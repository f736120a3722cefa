"""The fake server's thread engine: the standard library's ThreadingHTTPServer, one thread per connection.

Kept beside the asyncio engine (`--engine threads`) as the reference it is compared with: a wait (latency, a hang)
is a thread sleeping on the server's stop event, so every open request holds a thread.
"""

from __future__ import annotations

import functools
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from rise_batch.fake_llm.http import Dispatcher, HttpRequest, refuse_body
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

    def _serve(self) -> None:
        split = urlsplit(self.path)
        response = refuse_body(self.headers.get("Content-Length"), self.server.fake.max_body_bytes)
        if response is None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            request = HttpRequest(self.command, split.path, dict(parse_qsl(split.query)), self.headers, body)
            response = self.server.fake.dispatch(request)
        else:
            self.close_connection = True
        try:
            self.send_response(response.status)
            self.send_header("Content-Type", response.content_type)
            self.send_header("Content-Length", str(len(response.body)))
            self.send_header(SIMULATED_HEADER, "fake-llm")  # costs priced from these replies are not real money
            for name, value in response.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(response.body)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout on a hang)
            self.close_connection = True

    do_GET = do_POST = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:  # the request log replaces stderr chatter
        pass
