"""The reference transport: the openai SDK's AsyncOpenAI, on its httpx client (the default) or its aiohttp one.

openai's own retries are off (`max_retries=0`): the client's single retry policy decides. Requests go through the
SDK's generic `post(cast_to=httpx.Response)` rather than `chat.completions.create()`: it skips the SDK's per-call
typing transform of the messages, which costs more CPU than the rest of a request, while building, sending and
failing exactly as `create()` does. The SDK's exceptions are translated into the project's (rise_batch.llm.errors)
with the same text, so a recorded error reads the same on every transport.
"""

from __future__ import annotations

from typing import Any

import openai

from rise_batch.config import LLMConfig
from rise_batch.llm.errors import StatusError, TransportConnectionError, TransportTimeout

try:  # openai >= 2 ships on httpx2; older releases on httpx
    import httpx2 as httpx
except ImportError:  # pragma: no cover
    import httpx  # type: ignore[no-redef]


def sdk_client(config: LLMConfig, http_client: str = "httpx") -> openai.AsyncOpenAI:
    """AsyncOpenAI as the project configures it: no SDK retries, the config's timeout, a pool of `concurrency`."""
    pool = httpx.Limits(max_connections=config.concurrency, max_keepalive_connections=config.concurrency)
    return openai.AsyncOpenAI(
        base_url=config.base_url,
        api_key=config.api_key(),
        max_retries=0,
        timeout=config.timeout_s,
        http_client=_http_client(http_client, pool, config.timeout_s),
    )


def _http_client(backend: str, pool: httpx.Limits, timeout_s: float) -> httpx.AsyncClient:
    """The SDK's httpx client, or its aiohttp transport: about a third less CPU per request, which matters when
    one worker pushes hundreds of requests per second; its session must then be closed (`aclose()`) in the loop."""
    if backend == "httpx":
        return openai.DefaultAsyncHttpxClient(limits=pool, timeout=timeout_s)
    if backend == "aiohttp":
        return openai.DefaultAioHttpClient(limits=pool, timeout=timeout_s)
    raise ValueError(f"http_client must be 'httpx' or 'aiohttp', got {backend!r}")


class SdkTransport:
    """`await post(path, body, timeout) -> (body bytes, headers)` through AsyncOpenAI; see the module docstring."""

    def __init__(self, config: LLMConfig, *, http_client: str = "httpx") -> None:
        self.sdk = sdk_client(config, http_client)

    async def post(self, path: str, body: dict[str, Any], timeout: float | None = None) -> tuple[bytes, dict[str, str]]:
        options: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        try:
            response = await self.sdk.post(path, body=body, cast_to=httpx.Response, options=options)
        except openai.APIStatusError as e:
            raise StatusError(str(e), status_code=e.status_code, headers=dict(e.response.headers)) from e
        except openai.APITimeoutError as e:  # before its base class, APIConnectionError
            raise TransportTimeout(str(e)) from e
        except openai.APIConnectionError as e:
            raise TransportConnectionError(str(e)) from e
        return response.content, dict(response.headers)

    async def aclose(self) -> None:
        await self.sdk.close()
