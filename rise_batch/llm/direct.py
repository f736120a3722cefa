"""A lean HTTP path for the client: one aiohttp session posting orjson bytes, failures as the SDK's own exceptions.

Why: at hundreds of requests per second per worker, the SDK's request layer (request building, httpx, a second
`json.dumps` of a 40 kB body) costs ~5 ms of CPU per request, more than everything else a structuring worker does
for a document; this path costs ~1 ms. Nothing else changes: status errors are built by the SDK from the response
(`RateLimitError` with its headers, `InternalServerError`...), timeouts and connection failures become
`APITimeoutError` / `APIConnectionError`, so retry classification, retry-after and 429 cool-downs are the same.
The session belongs to the event loop that first uses it; `aclose()` must run in that loop.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import orjson

try:  # openai >= 2 ships on httpx2; older releases on httpx
    import httpx2 as httpx
except ImportError:  # pragma: no cover
    import httpx  # type: ignore[no-redef]


def dumps(body: Any) -> bytes:
    """orjson (25x faster on a 40 kB body); the stdlib for what orjson refuses (lone surrogates), as the SDK would."""
    try:
        return orjson.dumps(body)
    except TypeError:  # orjson.JSONEncodeError subclasses TypeError
        return json.dumps(body).encode()


class DirectTransport:
    """`await post(path, body, timeout) -> (body bytes, lower-cased headers)`; raises openai exception types."""

    def __init__(self, sdk: openai.AsyncOpenAI, api_key: str, concurrency: int, timeout_s: float) -> None:
        self._sdk = sdk  # builds status errors exactly as the SDK does
        self._base = str(sdk.base_url).rstrip("/")
        headers = {k: v for k, v in sdk.default_headers.items() if isinstance(v, str)}  # drops the SDK's Omit()s
        self._headers = headers | {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
        self._concurrency, self._timeout_s = concurrency, timeout_s
        self._session: Any = None

    def _open(self) -> Any:
        import aiohttp  # a dependency of ray[default]

        connector = aiohttp.TCPConnector(limit=self._concurrency, limit_per_host=0)
        return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=self._timeout_s))

    async def post(self, path: str, body: dict[str, Any], timeout: float | None = None) -> tuple[bytes, dict[str, str]]:
        import aiohttp

        if self._session is None:
            self._session = self._open()
        url = self._base + path
        options: dict[str, Any] = {} if timeout is None else {"timeout": aiohttp.ClientTimeout(total=timeout)}
        try:
            async with self._session.post(url, data=dumps(body), headers=self._headers, **options) as response:
                content = await response.read()
                status = response.status
                headers = {k.lower(): v for k, v in response.headers.items()}
        except TimeoutError:  # aiohttp's own timeouts subclass it
            raise openai.APITimeoutError(request=httpx.Request("POST", url)) from None
        except aiohttp.ClientError as e:
            message = f"{type(e).__name__}: {e}"
            raise openai.APIConnectionError(message=message, request=httpx.Request("POST", url)) from e
        if status >= 400:
            response = httpx.Response(status, headers=headers, content=content, request=httpx.Request("POST", url))
            raise self._sdk._make_status_error_from_response(response)
        return content, headers

    async def aclose(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()
