"""The fake server's asyncio engine (the default): one event loop on one thread, HTTP/1.1 keep-alive, stdlib only.

Why: the thread engine spends its CPU on thread switches and on http.server's e-mail header parser, on the same
cores as the clients it serves, and holds a thread for every request waiting out its latency. Here a wait is a timer
on the loop, the request head is parsed by hand (request line, `Name: value` lines, nothing else), and the answer is
one write. The routes, faults and request log are the server's `steps()`, the same generator the thread engine
drives through `dispatch()`, so both engines answer every request alike.

Behaviour at the edges matches the thread engine: a malformed request line or header gets a 400 and the connection
is closed; a head over 64 KiB a 431; a method other than GET, POST or DELETE a 501; a body over the limit a 413
before it is read; a client that goes away mid-latency still has its request answered into the void and logged; a
route that raises is printed to stderr and its connection closed without an answer.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import traceback
from email.utils import formatdate
from http import HTTPStatus
from urllib.parse import parse_qsl, urlsplit

from rise_batch.fake_llm.http import Dispatcher, HttpRequest, HttpResponse, error_body, json_response, refuse_body
from rise_batch.llm.simulated import SIMULATED_HEADER

HEAD_LIMIT = 2**16  # request line + headers, as http.server's per-line limit
METHODS = frozenset({"GET", "POST", "DELETE"})
SHUTDOWN_GRACE_S = 1.0  # requests woken by stop() get this long to write their 503 before connections are cut


class Headers(dict[str, str]):
    """Request headers looked up case-insensitively, as http.server's message object (the first of repeats wins)."""

    def __getitem__(self, name: str) -> str:
        return super().__getitem__(name.lower())

    def get(self, name: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return super().get(name.lower(), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and super().__contains__(name.lower())


class _Malformed(Exception):
    """The request head cannot be read: answered (400, 431 or 501) and the connection closed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.response = json_response(status, error_body(message, "invalid_request_error"))


class AsyncioEngine:
    """Binds at construction (so the port is known), serves from `start()` on its own event-loop thread."""

    def __init__(self, fake: Dispatcher, host: str, port: int) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.create_server((host, port), family=family, backlog=1024)
        self.port: int = self._sock.getsockname()[1]
        self.fake = fake
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None
        self._sleepers: set[asyncio.Future[bool]] = set()  # requests waiting out latency or a hang
        self._connections: set[asyncio.Task[None]] = set()
        self._busy: set[asyncio.Task[None]] = set()  # connections between reading a request and answering it

    def start(self) -> None:
        self._loop = asyncio.new_event_loop()
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), name="fake-llm", daemon=True)
        self._thread.start()
        started.wait()

    def _run(self, started: threading.Event) -> None:
        loop = self._loop
        assert loop is not None
        asyncio.set_event_loop(loop)
        self._server = loop.run_until_complete(
            asyncio.start_server(self._connection, sock=self._sock, limit=HEAD_LIMIT)
        )
        started.set()
        loop.run_forever()

    def stop(self) -> None:
        """Called after the server's stop event is set: waiting requests answer 503, then every connection closes."""
        if self._thread is None or self._loop is None:
            self._sock.close()
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
        self._thread = self._loop = None

    async def _shutdown(self) -> None:
        assert self._server is not None
        self._server.close()
        for sleeper in self._sleepers:
            if not sleeper.done():
                sleeper.set_result(True)
        if self._busy:
            await asyncio.wait(self._busy, timeout=SHUTDOWN_GRACE_S)
        for task in self._connections:
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            while await self._one(reader, writer, task):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away
        except asyncio.CancelledError:
            pass  # stop(): ended here, as Python 3.11's stream callback fails on a task that ends cancelled
        except Exception:  # a route's bug: printed, the connection dropped unanswered, as socketserver does
            print("fake-llm: exception while serving a request", file=sys.stderr)
            traceback.print_exc()
        finally:
            self._connections.discard(task)
            self._busy.discard(task)
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, task: asyncio.Task[None]) -> bool:
        """Serve one request on a connection; False when the connection is to be closed."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return False  # closed between requests (or mid-head)
        except asyncio.LimitOverrunError:
            await _send(writer, _Malformed(431, f"request head over {HEAD_LIMIT} bytes").response, close=True)
            return False
        self._busy.add(task)
        try:
            method, target, headers, keep = _parse_head(head)
        except _Malformed as e:
            await _send(writer, e.response, close=True)
            return False
        refused = refuse_body(headers.get("Content-Length"), self.fake.max_body_bytes)
        if refused is not None:
            await _send(writer, refused, close=True)
            return False
        length = int(headers.get("Content-Length") or 0)
        if length and (headers.get("Expect") or "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = await reader.readexactly(length) if length else b""
        split = urlsplit(target)
        response = await self._answer(HttpRequest(method, split.path, dict(parse_qsl(split.query)), headers, body))
        keep = keep and response.headers.get("Connection") != "close"
        await _send(writer, response, close=not keep)
        self._busy.discard(task)
        return keep

    async def _answer(self, request: HttpRequest) -> HttpResponse:
        """Drive the server's steps for `request`, awaiting each wait instead of sleeping a thread."""
        steps = self.fake.steps(request)
        try:
            wait = next(steps)
            while True:
                wait = steps.send(await self._wait(wait))
        except StopIteration as done:
            return done.value
        finally:
            steps.close()

    async def _wait(self, seconds: float) -> bool:
        """Sleep `seconds`; True when the server stopped first (at once if it already has), like Event.wait."""
        if self.fake.stopped() or seconds <= 0:
            return self.fake.stopped()
        loop = asyncio.get_running_loop()
        sleeper: asyncio.Future[bool] = loop.create_future()
        timer = loop.call_later(seconds, _settle, sleeper)
        self._sleepers.add(sleeper)
        try:
            return await sleeper
        finally:
            self._sleepers.discard(sleeper)
            timer.cancel()


def _settle(sleeper: asyncio.Future[bool]) -> None:
    if not sleeper.done():
        sleeper.set_result(False)


def _parse_head(head: bytes) -> tuple[str, str, Headers, bool]:
    """(method, target, headers, keep-alive) of a request head, or _Malformed."""
    lines = head[:-4].decode("latin-1").split("\r\n")
    parts = lines[0].split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _Malformed(400, f"bad request line {lines[0][:100]!r}")
    method, target, version = parts
    headers = Headers()
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise _Malformed(400, f"bad header line {line[:100]!r}")
        headers.setdefault(name.lower(), value.strip())
    if method not in METHODS:
        raise _Malformed(501, f"unsupported method {method!r}")
    connection = (headers.get("Connection") or "").lower()
    keep = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    return method, target, headers, keep


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


async def _send(writer: asyncio.StreamWriter, response: HttpResponse, *, close: bool) -> None:
    lines = [
        f"HTTP/1.1 {response.status} {_reason(response.status)}",
        "Server: fake-llm",
        f"Date: {formatdate(usegmt=True)}",
        f"Content-Type: {response.content_type}",
        f"Content-Length: {len(response.body)}",
        f"{SIMULATED_HEADER}: fake-llm",  # costs priced from these replies are not real money
        *(f"{name}: {value}" for name, value in response.headers.items()),
    ]
    if close and "Connection" not in response.headers:
        lines.append("Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    if len(response.body) < 2**16:
        writer.write(head + response.body)  # one segment for the usual small reply
    else:
        writer.write(head)
        writer.write(response.body)
    await writer.drain()
