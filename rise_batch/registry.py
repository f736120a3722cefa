"""Registries as data: one `Registry` type, and the registries of the LLM side (transports, structuring backends).

Every kind of extension point is a `Registry` of typed entries (keyword fields, capabilities as fields) kept in the
module of its kind, beside what its entries build: corpus formats in corpus/readers.py, retrievers and index parts in
index/retriever_kinds.py, agent systems and tool kinds in agent/systems.py, transports and backends here. One module
per kind, because an entry names code of its own layer (a format's row reader is pure core, a tool kind opens the
agent's tools), and a single module holding them all would have to import every layer. What users read (help strings,
errors, the guides' lists) is made from the registries (`one_of`, `names`, commands/doc_options.py).

A researcher's own module adds entries without the package being edited: `$RISE_BATCH_PLUGINS` names it
(`load_plugins`).

The registries here sit below config.py, which validates a configured name against them, and import nothing: an
entry's module is imported on first use (`Lazy`), so reading a registry loads no HTTP stack and no upper layer.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from rise_batch.errors import ConfigError


class Named(Protocol):
    @property
    def name(self) -> str: ...


E = TypeVar("E", bound=Named)


class Registry(MutableMapping[str, E], Generic[E]):
    """A table of typed entries by name, in registration order (the first match wins where order matters).

    A mapping, so `name in R`, `R[name]` and `list(R)` read as before; `lookup` is the one way a configured name is
    resolved (an unknown one is a ConfigError listing the registered names), and `add` the one way an entry joins."""

    def __init__(self, kind: str, entries: Iterable[E] = ()) -> None:
        self.kind = kind
        self._entries: dict[str, E] = {}
        for entry in entries:
            self.add(entry)

    def add(self, entry: E) -> E:
        if entry.name in self._entries:
            raise ValueError(f"{self.kind} {entry.name!r} is registered twice")
        self._entries[entry.name] = entry
        return entry

    def lookup(self, name: str) -> E:
        try:
            return self._entries[name]
        except KeyError:
            raise ConfigError(f"unknown {self.kind} {name!r}; choose {one_of(self)}") from None

    def __getitem__(self, name: str) -> E:
        return self._entries[name]

    def __setitem__(self, name: str, entry: E) -> None:
        if entry.name != name:
            raise ValueError(f"{self.kind} {entry.name!r} registered under another name, {name!r}")
        self._entries[name] = entry

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {list(self._entries)})"


class Lazy:
    """A factory named by "module:attribute" (plus fixed keyword arguments), imported when first called."""

    def __init__(self, ref: str, **kwargs: Any) -> None:
        self.ref, self.kwargs = ref, kwargs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        module, _, attribute = self.ref.partition(":")
        return getattr(importlib.import_module(module), attribute)(*args, **self.kwargs, **kwargs)

    def __repr__(self) -> str:
        return f"Lazy({self.ref!r}{''.join(f', {k}={v!r}' for k, v in self.kwargs.items())})"


PLUGINS_ENV = "RISE_BATCH_PLUGINS"
_loaded: set[str] = set()


def load_plugins() -> list[str]:
    """Load what $RISE_BATCH_PLUGINS names (comma-separated), once each: a module of a researcher's own that adds
    entries to the registries (a retriever and its index part, a format, a system), imported, or `module:function`,
    imported and the function called with no argument, so that `rise-batch` and its workers know the entries
    without the package being edited. The CLI calls it before building its parser (choices and help include the
    entries), the jobs/ scripts before they run, and every executor worker before building its stage (a Ray actor
    opens the same retriever). One that cannot be loaded is refused in one line naming it."""
    names = [n.strip() for n in os.environ.get(PLUGINS_ENV, "").split(",") if n.strip()]
    for name in names:
        if name in _loaded:
            continue
        module, _, function = name.partition(":")
        try:
            loaded = importlib.import_module(module)
            if function:
                getattr(loaded, function)()
        except (ImportError, AttributeError) as e:
            raise ConfigError(
                f"${PLUGINS_ENV}: cannot load {name!r} ({e}); name a module on the Python path, or module:function"
            ) from e
        _loaded.add(name)
    return names


@dataclass(frozen=True, kw_only=True)
class TransportEntry:
    """An HTTP transport for LLM calls: `factory(config: LLMConfig) -> rise_batch.llm.transport.Transport`."""

    name: str
    factory: Callable[[Any], Any]
    help: str

    def __call__(self, config: Any) -> Any:
        return self.factory(config)


TRANSPORTS: Registry[TransportEntry] = Registry(
    "transport",
    [
        TransportEntry(
            name="httpx", factory=Lazy("rise_batch.llm.sdk:SdkTransport", http_client="httpx"),
            help="the openai SDK over httpx",
        ),
        TransportEntry(
            name="aiohttp", factory=Lazy("rise_batch.llm.sdk:SdkTransport", http_client="aiohttp"),
            help="the openai SDK over aiohttp",
        ),
        TransportEntry(
            name="direct", factory=Lazy("rise_batch.llm.direct:DirectTransport"),
            help="one aiohttp session posting orjson bytes: ~1 ms of CPU a request instead of the SDK's ~5",
        ),
    ],
)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Backend:
    """A structuring backend: what builds it inside a worker, and whether it calls an LLM (then its rows are priced,
    its requests rate-limited and keyed, its prompt and model enter the run hash, and it runs 2 workers by default)."""

    name: str
    factory: Callable[..., Any]  # (cfg: StructureConfig, prompt_text, limiter) -> backend with `structure(doc, hash)`
    calls_llm: bool
    default_workers: int  # `workers` unset: 0 runs in this process, N >= 1 starts N Ray actors
    help: str


BACKENDS: Registry[Backend] = Registry(
    "backend",
    [
        Backend(
            name="heuristic", factory=Lazy("rise_batch.structuring.worker:heuristic_backend"), calls_llm=False,
            default_workers=0, help="free, offline: sections from the document's own headings and paragraphs",
        ),
        Backend(
            name="llm", factory=Lazy("rise_batch.structuring.worker:llm_backend"), calls_llm=True,
            default_workers=2, help="any OpenAI-compatible model proposes the sections",
        ),
    ],
)  # fmt: skip


def one_of(names: Iterable[str] | Mapping[str, Any]) -> str:
    """The registered names as an error message lists them: `'a', 'b' or 'c'`."""
    quoted = [repr(n) for n in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
