"""The fake server's asyncio engine (the default): one event loop on one thread, HTTP/1.1 keep-alive, stdlib only.

Why: the thread engine spends its CPU on thread switches and on http.server's e-mail header parser, on the same
cores as the clients it serves, and holds a thread for every request waiting out its latency. Here a wait is a timer
on the loop, the request head is parsed by hand (request line, `Name: value` lines, nothing else), and the answer is
one write. The routes, faults and request log are the server's `steps()`, the same generator the thread engine
drives through `dispatch()`, so both engines answer every request alike.

Behaviour at the edges matches the thread engine: a malformed request line or header gets a 400 and the connection
is closed; a head over 64 KiB a 431; a method other than GET, POST or DELETE a 501; a body over the limit a 413
before it is read; a client that goes away mid-latency still has its request answered into the void and logged; a
route that raises is printed to stderr and its connection closed without an answer. The connection limits
(http.ConnectionLimits) are a deadline per step: the first byte of a request within the idle timeout (else the
connection is closed quietly), the rest of its head within the header timeout and its body within the body
timeout (else a 408 and the connection closed), its reply taken by the client within the body timeout; a body that
would pass the bytes held across connections is answered 503 unread.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time
import traceback
from email.utils import formatdate
from http import HTTPStatus
from urllib.parse import parse_qsl, urlsplit

from rise_batch.fake_llm.http import (
    ConnectionLimits,
    Dispatcher,
    HttpRequest,
    HttpResponse,
    busy,
    error_body,
    json_response,
    refuse_body,
    timed_out,
)
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
        self._deadlines = Deadlines(fake.limits)
        self._sweeper: asyncio.Task[None] | None = None

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
        self._sweeper = loop.create_task(self._deadlines.sweep())
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
        if self._sweeper is not None:
            self._sweeper.cancel()
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
        except asyncio.CancelledError:  # stop(), or a deadline passed: ended here, as Python 3.11's stream callback
            expired = self._deadlines.expired.get(task)  # fails on a task that ends cancelled
            if expired in ("head", "body"):  # the client stalled mid-request: told so (written as it closes)
                response = timed_out(expired, self._deadlines.limits[expired])
                writer.write(_head(response, close=True) + response.body)
        except Exception:  # a route's bug: printed, the connection dropped unanswered, as socketserver does
            print("fake-llm: exception while serving a request", file=sys.stderr)
            traceback.print_exc()
        finally:
            self._deadlines.forget(task)
            self._connections.discard(task)
            self._busy.discard(task)
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, task: asyncio.Task[None]) -> bool:
        """Serve one request on a connection; False when the connection is to be closed. Each wait on the client
        has a deadline (see `Deadlines`); the route's own waits (latency, hangs) have none."""
        budget, deadline = self.fake.budget, self._deadlines.set
        deadline(task, "idle")  # an idle keep-alive connection is closed quietly, as servers close theirs
        first = await reader.read(1)
        if not first:
            return False  # closed between requests
        deadline(task, "head")
        try:
            head = first + await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return False  # closed mid-head
        except asyncio.LimitOverrunError:
            await self._send(writer, task, _Malformed(431, f"request head over {HEAD_LIMIT} bytes").response, True)
            return False
        self._busy.add(task)
        try:
            method, target, headers, keep = _parse_head(head)
        except _Malformed as e:
            await self._send(writer, task, e.response, True)
            return False
        refused = refuse_body(headers.get("Content-Length"), self.fake.max_body_bytes)
        if refused is not None:
            await self._send(writer, task, refused, True)
            return False
        length = int(headers.get("Content-Length") or 0)
        if not budget.reserve(length):  # answered unread: the bytes held across connections stay bounded
            await self._send(writer, task, busy(budget, length), True)
            return False
        try:
            if length and (headers.get("Expect") or "").lower() == "100-continue":
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            deadline(task, "body")
            body = await reader.readexactly(length) if length else b""
            self._deadlines.clear(task)
            split = urlsplit(target)
            request = HttpRequest(method, split.path, dict(parse_qsl(split.query)), headers, body)
            del body
            response = await self._answer(request)
        finally:
            budget.release(length)
        keep = keep and response.headers.get("Connection") != "close"
        await self._send(writer, task, response, not keep)
        self._busy.discard(task)
        return keep

    async def _send(
        self, writer: asyncio.StreamWriter, task: asyncio.Task[None], response: HttpResponse, close: bool
    ) -> None:
        """Write `response`; a client that does not take it within the body timeout has its connection closed."""
        head = _head(response, close=close)
        if len(response.body) < 2**16:
            writer.write(head + response.body)  # one segment for the usual small reply
        else:  # a large body (a batch's output file) is not copied into one buffer with its head
            writer.write(head)
            writer.write(response.body)
        if writer.transport.get_write_buffer_size():  # the usual small reply went out at once: no wait, no timer
            self._deadlines.set(task, "send")
            await writer.drain()
            self._deadlines.clear(task)

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


def _head(response: HttpResponse, *, close: bool) -> bytes:
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
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class Deadlines:
    """When each connection's current wait on its client must end, checked by one sweeper task for all of them.

    A wait is one of: `idle` (for a request's first byte), `head` (for the rest of its head), `body` (for its body),
    `send` (for the client to take a reply that did not fit the socket buffer); each has its limit from
    http.ConnectionLimits. A connection past its deadline is cancelled, and `expired` says which wait it was in (the
    connection then answers 408 for `head` and `body`, and closes). Setting a deadline is a dict store: a timer per
    wait (`asyncio.timeout`) cost ~30 us each, three per request, on a server whose whole request costs ~150 us."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = {
            "idle": limits.idle_timeout_s,
            "head": limits.header_timeout_s,
            "body": limits.body_timeout_s,
            "send": limits.body_timeout_s,
        }
        self.tick = min(1.0, max(0.05, min(self.limits.values()) / 4))  # a deadline is kept within this much
        self._due: dict[asyncio.Task[None], tuple[float, str]] = {}
        self.expired: dict[asyncio.Task[None], str] = {}

    def set(self, task: asyncio.Task[None], wait: str) -> None:
        self._due[task] = (time.monotonic() + self.limits[wait], wait)

    def clear(self, task: asyncio.Task[None]) -> None:
        self._due.pop(task, None)

    def forget(self, task: asyncio.Task[None]) -> None:
        self._due.pop(task, None)
        self.expired.pop(task, None)

    async def sweep(self) -> None:
        while True:
            await asyncio.sleep(self.tick)
            now = time.monotonic()
            for task, (due, wait) in list(self._due.items()):
                if due <= now:
                    del self._due[task]
                    self.expired[task] = wait
                    task.cancel()
