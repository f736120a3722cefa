"""Registries as data: each maps a name a config may hold to what builds it, named as "module:attribute".

They sit below config.py, which validates a configured name against them, and import nothing: an entry's module is
imported on first use (`Lazy`), so reading a registry loads no HTTP stack and no upper layer. Adding a transport (or
a backend) is one line here plus its module.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple


class Lazy:
    """A factory named by "module:attribute" (plus fixed keyword arguments), imported when first called."""

    def __init__(self, ref: str, **kwargs: Any) -> None:
        self.ref, self.kwargs = ref, kwargs

    def __call__(self, *args: Any) -> Any:
        module, _, attribute = self.ref.partition(":")
        return getattr(importlib.import_module(module), attribute)(*args, **self.kwargs)

    def __repr__(self) -> str:
        return f"Lazy({self.ref!r}{''.join(f', {k}={v!r}' for k, v in self.kwargs.items())})"


# name -> factory(config: LLMConfig) -> rise_batch.llm.transport.Transport
TRANSPORTS: dict[str, Callable[[Any], Any]] = {
    "httpx": Lazy("rise_batch.llm.sdk:SdkTransport", http_client="httpx"),
    "aiohttp": Lazy("rise_batch.llm.sdk:SdkTransport", http_client="aiohttp"),
    "direct": Lazy("rise_batch.llm.direct:DirectTransport"),
}


class Backend(NamedTuple):
    """A structuring backend: what builds it inside a worker, and whether it calls an LLM (then its rows are priced,
    its requests rate-limited and keyed, its prompt and model enter the run hash, and it runs 2 workers by default)."""

    name: str
    factory: Callable[..., Any]  # (cfg: StructureConfig, prompt_text, limiter) -> backend with `structure(doc, hash)`
    calls_llm: bool
    default_workers: int  # `workers` unset: 0 runs in this process, N >= 1 starts N Ray actors


# name -> Backend
BACKENDS: dict[str, Backend] = {
    "heuristic": Backend("heuristic", Lazy("rise_batch.structuring.worker:heuristic_backend"), False, 0),
    "llm": Backend("llm", Lazy("rise_batch.structuring.worker:llm_backend"), True, 2),
}


def one_of(names: Mapping[str, Any]) -> str:
    """The registered names as an error message lists them: `'a', 'b' or 'c'`."""
    quoted = [repr(n) for n in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
