"""The fake OpenAI-compatible server: a route table, admin endpoints, and an HTTP engine that serves them.

Routes are data (`FakeLLMServer.add_route`), so later surfaces of the API (files, batches, responses) are new
handler modules registering routes, not edits to the request loop. Admin endpoints under `/v1/_...` let a test or a
benchmark read the server's own counts and request log, and change fault settings while it runs.

Left running on a shared machine, the server must not be a toy anyone can reconfigure or exhaust: the admin routes
that change behaviour (`_config`, `_batch_config`, `_reset`) answer 403 unless the server was started with
`allow_config=True` (`--allow-config`), and a request body over `max_body_bytes` is refused with a 413 before it is
read. Connections are bounded too (`limits`, http.ConnectionLimits): a request head must arrive within
`header_timeout_s`, a body within `body_timeout_s` (else a 408 and the connection is closed), an idle keep-alive
connection is closed after `idle_timeout_s`, and the bodies held across all connections never pass
`max_buffered_bytes` (a request that would pass it is answered 503 unread). In-process callers change settings
with `configure()` directly.

Two engines serve the same routes through the same `dispatch`: `asyncio` (the default: one event loop, a wait is a
timer, ~half the CPU per request of threads) and `threads` (the standard library's ThreadingHTTPServer).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Generator
from typing import Any

from rise_batch.errors import ConfigError
from rise_batch.fake_llm import batch, embeddings, responses
from rise_batch.fake_llm.chat import RouteHandler, chat_completions, default_responders
from rise_batch.fake_llm.engine_asyncio import AsyncioEngine
from rise_batch.fake_llm.engine_threads import ThreadEngine
from rise_batch.fake_llm.faults import FaultConfig
from rise_batch.fake_llm.http import (
    BadRequest,
    BodyBudget,
    ConnectionLimits,
    HttpRequest,
    HttpResponse,
    Steps,
    error_body,
    json_response,
)
from rise_batch.fake_llm.request import Responder
from rise_batch.fake_llm.serve_options import ServeOptions
from rise_batch.fake_llm.state import ServerState
from rise_batch.llm.pricing import PriceTable
from rise_batch.llm.tokens import counter_for

ADMIN_WRITES = frozenset({"/v1/_config", "/v1/_batch_config", "/v1/_reset"})  # they change how the server answers
MAX_BODY_BYTES = ServeOptions.max_body_bytes
ENGINES: dict[str, Callable[..., AsyncioEngine | ThreadEngine]] = {"asyncio": AsyncioEngine, "threads": ThreadEngine}
# One model per tokenizer encoding (o200k_base, cl100k_base): loaded before serving, as a real API has them loaded.
WARM_MODELS = ("gpt-5.4-nano", "gpt-4")


class FakeLLMServer:
    """`with FakeLLMServer(p429=0.2, seed=1) as server:` ... `server.base_url` ... `server.stats()`."""

    def __init__(
        self,
        host: str = ServeOptions.host,
        port: int = 0,
        *,
        responders: list[Responder] | None = None,
        log_limit: int = 1_000_000,
        allow_config: bool = False,
        max_body_bytes: int = MAX_BODY_BYTES,
        engine: str = ServeOptions.engine,
        limits: ConnectionLimits | None = None,
        **faults: Any,
    ) -> None:
        if not isinstance(max_body_bytes, int) or max_body_bytes <= 0:
            raise ValueError(f"max_body_bytes must be a positive integer, got {max_body_bytes!r}")
        limits = limits if limits is not None else ConnectionLimits.for_bodies(max_body_bytes)
        limits.check(max_body_bytes)
        self.limits, self.budget = limits, BodyBudget(limits.max_buffered_bytes)
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
        self.allow_config, self.max_body_bytes = allow_config, max_body_bytes
        self.state = ServerState(FaultConfig().updated(faults), log_limit)
        self.responders = responders if responders is not None else default_responders()
        self.routes: list[tuple[str, re.Pattern[str], RouteHandler]] = []
        for method, pattern, handler in DEFAULT_ROUTES:
            self.add_route(method, pattern, handler)
        for install in ROUTE_MODULES:
            install(self)
        self.engine = engine
        try:
            self._engine = ENGINES[engine](self, host, port)
        except OSError as e:  # a port in use or a host not of this machine: the user's setting, one line
            why = e.strerror or str(e)
            raise ConfigError(
                f"fake-llm: cannot listen on {host}:{port}: {why} (choose another --port or --host)"
            ) from e
        self.host, self.port = host, self._engine.port

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    def add_route(self, method: str, pattern: str, handler: RouteHandler, *, first: bool = False) -> None:
        """Serve `method` requests whose path fully matches `pattern`; `first` puts it ahead of existing routes."""
        route = (method.upper(), re.compile(pattern), handler)
        self.routes.insert(0, route) if first else self.routes.append(route)

    def start(self) -> FakeLLMServer:
        """Serve from a background thread. The token counters are built first: loading an encoding takes ~0.6 s of
        CPU, which the first requests (the 16 first model calls of a benchmark) would otherwise wait for."""
        for model in WARM_MODELS:
            counter_for(model)
        self._engine.start()
        return self

    def stop(self) -> None:
        self.state.stop.set()  # first: requests waiting on latency or a hang answer 503 at once
        self._engine.stop()

    def stopped(self) -> bool:
        return self.state.stop.is_set()

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stats(self) -> dict[str, Any]:
        return self.state.stats()

    def log(self, since: int = 0) -> list[dict[str, Any]]:
        return self.state.log(since)

    def configure(self, **changes: Any) -> FaultConfig:
        return self.state.configure(changes)

    def reset(self) -> None:
        self.state.reset()

    def dispatch(self, request: HttpRequest) -> HttpResponse:
        """The answer to `request`, waiting (latency, hangs) on this thread: the thread engine's way."""
        steps = self.steps(request)
        try:
            wait = next(steps)
            while True:
                wait = steps.send(self.state.stop.wait(wait))
        except StopIteration as done:
            return done.value

    def steps(self, request: HttpRequest) -> Steps[HttpResponse]:
        """The answer to `request` as a generator of the waits before it (see `http.Steps`)."""
        if request.path in ADMIN_WRITES and not self.allow_config:
            message = f"{request.path} is disabled: start the server with --allow-config (allow_config=True)"
            return json_response(403, error_body(message, "permission_error"))
        path_matched = False
        for method, pattern, handler in self.routes:
            match = pattern.fullmatch(request.path)
            if match is None:
                continue
            path_matched = True
            if method == request.method:
                try:
                    answer = handler(self, request, match)
                    if isinstance(answer, Generator):
                        answer = yield from answer
                    return answer
                except BadRequest as e:
                    return json_response(400, error_body(str(e), "invalid_request_error"))
        if path_matched:
            return json_response(405, error_body(f"{request.method} not allowed on {request.path}", "invalid_request"))
        return json_response(404, error_body(f"no route for {request.path}", "invalid_request_error"))


def _models(server: FakeLLMServer, request: HttpRequest, _: re.Match[str]) -> HttpResponse:
    names = ["fake-llm", *sorted(PriceTable.load().prices)]
    data = [{"id": n, "object": "model", "created": 0, "owned_by": "fake-llm"} for n in names]
    return json_response(200, {"object": "list", "data": data})


def _stats(server: FakeLLMServer, request: HttpRequest, _: re.Match[str]) -> HttpResponse:
    return json_response(200, server.stats())


def _log(server: FakeLLMServer, request: HttpRequest, _: re.Match[str]) -> HttpResponse:
    return json_response(200, {"entries": server.log(int(request.query.get("since", 0)))})


def _config(server: FakeLLMServer, request: HttpRequest, _: re.Match[str]) -> HttpResponse:
    changes = request.json()
    if not isinstance(changes, dict):
        raise BadRequest("POST /v1/_config takes a JSON object of settings")
    try:
        return json_response(200, server.configure(**changes).as_dict())
    except (TypeError, ValueError) as e:
        raise BadRequest(str(e)) from None


def _props(server: FakeLLMServer, request: HttpRequest, _: re.Match[str]) -> HttpResponse:
    """llama.cpp's `GET /props`: the slot's context size, where clients read it (only when the server has one)."""
    n_ctx = server.state.config.n_ctx
    if n_ctx is None:
        return json_response(404, error_body("File Not Found", "not_found_error"))
    settings = {"n_ctx": n_ctx, "params": {"n_predict": -1}}
    return json_response(200, {"default_generation_settings": settings, "total_slots": 1, "model_path": "fake-llm"})


def _reset(server: FakeLLMServer, request: HttpRequest, _: re.Match[str]) -> HttpResponse:
    server.reset()
    return json_response(200, {"reset": True})


DEFAULT_ROUTES: list[tuple[str, str, RouteHandler]] = [
    ("POST", "/v1/chat/completions", chat_completions),
    ("GET", "/v1/models", _models),
    ("GET", "/v1/_stats", _stats),
    ("GET", "/v1/_log", _log),
    ("POST", "/v1/_config", _config),
    ("POST", "/v1/_reset", _reset),
    ("GET", "/props", _props),
    ("GET", "/v1/props", _props),
]
# Further surfaces of the API register their own routes: files + batches, POST /v1/responses, POST /v1/embeddings.
ROUTE_MODULES: tuple[Callable[[FakeLLMServer], None], ...] = (batch.install, responses.install, embeddings.install)
