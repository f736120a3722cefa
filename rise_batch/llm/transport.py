"""How an LLM request reaches the server: one Transport per HTTP stack, one wrapper per API, both chosen by name.

`LLMClient` owns everything that does not depend on the wire (limiter leases, tenacity retries, usage, pricing) and
hands each attempt to a Transport: `await post(path, body, timeout) -> (content bytes, lower-cased headers)`, which
raises only the project's failure types (rise_batch.llm.errors: `StatusError`, `TransportTimeout`,
`TransportConnectionError`), so one retry policy classifies every transport alike.

Transports (`llm.http_backend`):
- `direct` (the default): the project's lean aiohttp + orjson path (rise_batch.llm.direct);
- `httpx` / `aiohttp`: the openai SDK's AsyncOpenAI on its httpx or aiohttp HTTP client (rise_batch.llm.sdk; the
  reference path).
APIs (the run config's `api`), wrappers over any transport:
- `chat`: chat completions as they are;
- `responses`: each chat request goes out as a Responses API request, each reply comes back chat-shaped
  (rise_batch.llm.responses).

Adding a transport takes its module (a class built from the `LLMConfig`, with `post` and `aclose`) and one line in
`TRANSPORTS` (rise_batch.registry, below config.py, which validates the name against it). Entries name their class as
"module:attribute" and import it on first use, so no HTTP stack loads before a client is made.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from rise_batch.registry import TRANSPORTS as TRANSPORTS  # re-exported: the transport layer reads it here
from rise_batch.registry import Lazy, one_of

CHAT_PATH = "/chat/completions"
EMBEDDINGS_PATH = "/embeddings"


@runtime_checkable
class Transport(Protocol):
    """One HTTP stack (or a wrapper over one); the session belongs to the event loop that first uses it."""

    async def post(self, path: str, body: dict[str, Any], timeout: float | None = None) -> tuple[bytes, dict[str, str]]:
        """POST `body` as JSON to `path` under the base URL: the raw reply body and its headers, or a failure from
        rise_batch.llm.errors (`timeout`: this request's own limit, else the config's)."""
        ...

    async def aclose(self) -> None:
        """Close the HTTP session; run it in the loop that used the transport."""
        ...


# name -> wrapper(transport) -> Transport, or None for requests sent as they are
APIS: dict[str, Callable[[Transport], Transport] | None] = {
    "chat": None,
    "responses": Lazy("rise_batch.llm.responses:ResponsesTransport"),
}


def make_transport(config: Any, *, http_backend: str | None = None, api: str = "chat") -> Transport:
    """The transport `config` (an LLMConfig) names, or `http_backend` when given, wrapped for `api`."""
    name = http_backend or config.http_backend
    if name not in TRANSPORTS:
        raise ValueError(f"http_backend must be {one_of(TRANSPORTS)}, got {name!r}")
    if api not in APIS:
        raise ValueError(f"api must be {one_of(APIS)}, got {api!r}")
    transport = TRANSPORTS[name](config)
    wrap = APIS[api]
    return wrap(transport) if wrap is not None else transport
