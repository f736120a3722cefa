"""The `openai:MODEL` embedder: passages and queries embedded by any OpenAI-compatible `POST /embeddings` server.

vLLM, TEI, llama.cpp and OpenAI serve the same request and reply. Every request goes through the project's LLM client
(rise_batch.llm.client: `LLMClient.embed`, one `_attempt` per HTTP request as chat calls), so the limiter (rpm, tpm,
concurrency), the retry policy, the `--max-cost` budget and the price table (`rise_batch/data/prices.yaml`) apply
to embeddings as to agent and judge calls. A shard's passages are cut into requests of `embed_batch` inputs (TEI's
default limit is 32 a request) sent concurrently, as many at once as `concurrency` allows.

The client lives on an event loop of its own, in a thread, so `embed(texts)` is a plain call from the build (which
embeds shards in the building process: the work is the server's, and one limiter then holds the whole job's rates)
and from a search (even one made inside another event loop). Loading sends one short request: it checks the
endpoint and key before any shard, and learns the vectors' dimension, which the index records.
"""

from __future__ import annotations

import asyncio
import atexit
import threading
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from rise_batch.config import LLMConfig
from rise_batch.index.embedders import Embedder, EmbedderSpec

if TYPE_CHECKING:
    import numpy as np

DEFAULT_BATCH = 32  # inputs per request (TEI refuses more than 32 by default; OpenAI takes 2048)
PROBE_TEXT = "dimension probe"


class RemoteEmbedder(Embedder):
    """`embed(texts)`: unit float32 rows from the server, in input order; counts what was sent and billed."""

    chunk = 1 << 30  # a shard's passages at once: cut into requests and sent concurrently here

    def __init__(self, spec: EmbedderSpec, endpoint: LLMConfig, budget: Any = None, batch: int = DEFAULT_BATCH):
        super().__init__(spec, None, "", spec.dim, "openai-compatible")
        self.endpoint, self.batch = endpoint, max(1, int(batch))
        self.requests = self.input_tokens = 0
        self.cost_usd = 0.0
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="embed-remote", daemon=True).start()
        self._client = self._call(self._open(budget))
        atexit.register(self.close)  # a search's embedder lives as long as its process: close its session then
        self.dim = len(self.embed_raw([PROBE_TEXT])[0])

    def identity(self) -> dict:
        """The model and dimension (no weights to digest: the server's name for them stands in), and the endpoint
        the queries of a search are embedded at (its base URL and the key's variable, never the key)."""
        return {
            **super().identity(),
            "dim": self.dim,
            "base_url": self.endpoint.base_url,
            "api_key_env": self.endpoint.api_key_env,
        }

    async def _open(self, budget: Any) -> Any:
        from rise_batch.llm.client import LLMClient  # lazy: loads openai's types and the HTTP stack

        return LLMClient(self.endpoint, budget=budget)

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def embed_raw(self, texts: list[str]) -> list[list[float]]:
        """The server's vectors of `texts` (each non-empty), as they came."""
        return self._call(self._embed(texts))

    async def _embed(self, texts: list[str]) -> list[list[float]]:
        dims = self.spec.dim or None
        calls = [
            self._client.embed(texts[i : i + self.batch], dimensions=dims) for i in range(0, len(texts), self.batch)
        ]
        replies = await asyncio.gather(*calls)
        for r in replies:
            self.requests += r.attempts
            self.input_tokens += r.input_tokens
            self.cost_usd += r.cost_usd
        return [v for r in replies for v in r.vectors]

    def embed(self, texts: list[str]) -> np.ndarray:
        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        cut = self._cut if self.spec.max_tokens else (lambda t: t)
        live = [i for i, t in enumerate(texts) if t.strip()]  # the API refuses an empty input: a zero row, as others
        if live:
            vecs = np.asarray(self.embed_raw([cut(texts[i]) for i in live]), dtype=np.float32)
            if vecs.shape != (len(live), self.dim):
                raise ValueError(f"{self.spec}: the server answered vectors of shape {vecs.shape}, not (n, {self.dim})")
            norms = np.linalg.norm(vecs, axis=1, keepdims=True)
            out[live] = np.divide(vecs, norms, out=np.zeros_like(vecs), where=norms > 0)
        return out

    def _cut(self, text: str) -> str:
        from rise_batch.llm.tokens import counter_for  # lazy: the token counter loads its encoding on first use

        return counter_for(self.spec.name).cut(text, self.spec.max_tokens)

    def close(self) -> None:
        """Close the client's HTTP session and stop its loop."""
        if self._loop.is_running():
            self._call(self._client.aclose())
            self._loop.call_soon_threadsafe(self._loop.stop)
            atexit.unregister(self.close)


def endpoint_config(base_url: str | None, model: str, api_key_env: str = "OPENAI_API_KEY", **limits: Any) -> LLMConfig:
    """The LLMConfig of an embeddings endpoint (`limits`: rpm, tpm, concurrency, ... as for any model call)."""
    cfg = replace(LLMConfig(), base_url=base_url, model=model, api_key_env=api_key_env, **limits)
    cfg.validate()
    cfg.api_key()  # no key and not a local server: one line now, not a 401 per shard
    return cfg


def load_remote(spec: EmbedderSpec, endpoint: LLMConfig | None = None, budget: Any = None, batch: int = 0) -> Embedder:
    """The embedder of `spec` at `endpoint` (None: OpenAI's API with $OPENAI_API_KEY)."""
    cfg = endpoint if endpoint is not None else endpoint_config(None, spec.name)
    return RemoteEmbedder(spec, replace(cfg, model=spec.name), budget, batch or DEFAULT_BATCH)
