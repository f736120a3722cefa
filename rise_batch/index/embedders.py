"""Embedding models for the dense retriever, as a registry (`EMBEDDERS`): wordllama offline (the default), a local
sentence-transformers model, or any OpenAI-compatible `/embeddings` server.

An embedder is named by a spec string (`--embedder`, config key `embedder`), `KIND:REST`:
  `wordllama` = `wordllama:l2_supercat:256`   static token embeddings bundled in the wordllama wheel (`.[dense]`)
  `st:/path/to/model`                          a sentence-transformers model directory (GPU if torch sees one)
  `openai:MODEL[:DIM]`                         POST {--base-url}/embeddings (vLLM, TEI, llama.cpp, OpenAI)
and, after a colon-free `@N` suffix, the tokens kept per document (`wordllama@2048`; 0, the default, keeps all).
A kind is one `EmbedderKind` entry: how its spec's rest parses, how it loads, and whether it is `remote` (its
shards are then embedded by the building process's rate-limited, priced client, not by worker processes).

wordllama 0.4 looks for its bundled tokenizer in `wordllama/tokenizer/` (which the wheel does not have: it ships
`tokenizers/`) and then tries to download it. `load_embedder` copies the bundled file into a cache folder's
`tokenizers/` and loads with `disable_download=True`, so nothing is fetched. Its mean pooling is done here over the
unpadded token ids: wordllama's own `embed` pads a batch to its longest document, which for 30k-character
articles costs gigabytes and minutes. The result equals `WordLlamaInference.embed(texts, norm=True)` (tested).

`identity()` is what an index records and what a query embedder must match: the spec plus a digest of the
weights, so an index is never searched with vectors from another space.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rise_batch.cache import cache_dir
from rise_batch.errors import ConfigError
from rise_batch.registry import Lazy, Registry

if TYPE_CHECKING:
    import numpy as np

DEFAULT_EMBEDDER = "wordllama:l2_supercat:256"
DENSE_EXTRA = "pip install 'rise_batch[dense]' (or pip install wordllama)"
_LOADED: dict[EmbedderSpec, Embedder] = {}


class MissingExtraError(ConfigError):
    """An optional dependency the asked-for retriever needs is not installed (exit 2, with the install line)."""


@dataclass(frozen=True)
class EmbedderSpec:
    """Which model embeds documents and queries: `kind` names its EMBEDDERS entry."""

    kind: str
    name: str
    dim: int = 0  # wordllama: the weights' dimension; st: filled from the model once loaded; openai: asked (0: own)
    max_tokens: int = 0  # tokens kept per document (0 = all)

    def __str__(self) -> str:
        base = EMBEDDERS.lookup(self.kind).spell(self)
        return base + (f"@{self.max_tokens}" if self.max_tokens else "")

    def to_json(self) -> dict:
        return asdict(self)


def _parse_wordllama(text: str, rest: str, max_tokens: int) -> EmbedderSpec:
    config, _, dim = rest.partition(":")
    try:
        return EmbedderSpec("wordllama", config or "l2_supercat", int(dim or 256), max_tokens)
    except ValueError:
        raise ConfigError(f"embedder {text!r}: dimension must be an integer, got {dim!r}") from None


def _parse_st(text: str, rest: str, max_tokens: int) -> EmbedderSpec:
    if not rest:
        raise ConfigError(f"embedder {text!r}: name the model directory, st:/path/to/sentence-transformers-model")
    return EmbedderSpec("st", str(Path(rest).expanduser().resolve()), 0, max_tokens)


def _parse_openai(text: str, rest: str, max_tokens: int) -> EmbedderSpec:
    model, _, dim = rest.partition(":")
    if not model or (dim and not (dim.isdigit() and int(dim) > 0)):
        raise ConfigError(f"embedder {text!r}: expected openai:MODEL or openai:MODEL:DIMENSIONS (a positive integer)")
    return EmbedderSpec("openai", model, int(dim or 0), max_tokens)


@dataclass(frozen=True, kw_only=True)
class EmbedderKind:
    """A kind of embedder a spec can name: `parse(text, rest after "KIND:", max_tokens) -> spec`, `load(spec,
    endpoint) -> Embedder` (`endpoint`: the LLMConfig of a remote one), how a spec is written back (`spell`),
    whether it embeds over HTTP (`remote`), and the spec's form and help for users."""

    name: str
    parse: Callable[[str, str, int], EmbedderSpec]
    load: Callable[..., Embedder]
    spell: Callable[[EmbedderSpec], str]
    remote: bool = False
    form: str
    help: str


def parse_embedder(text: str | None) -> EmbedderSpec:
    """`KIND[:REST][@max_tokens]` of a registered kind (`wordllama[:config[:dim]]`, `st:PATH`, `openai:MODEL[:DIM]`);
    a one-line ConfigError otherwise."""
    text = (text or DEFAULT_EMBEDDER).strip()
    base, _, cut = text.rpartition("@") if "@" in text else (text, "", "")
    try:
        max_tokens = int(cut) if cut else 0
    except ValueError:
        raise ConfigError(f"embedder {text!r}: the part after @ must be a token count, got {cut!r}") from None
    if max_tokens < 0:
        raise ConfigError(f"embedder {text!r}: max tokens must be >= 0")
    kind, _, rest = base.partition(":")
    if kind not in EMBEDDERS:
        forms = " or ".join(k.form for k in EMBEDDERS.values())
        raise ConfigError(f"embedder {text!r}: expected {forms} (optionally @max_tokens)")
    return EMBEDDERS[kind].parse(text, rest, max_tokens)


def embedders_help() -> str:
    """The registered embedder kinds as option help says them."""
    return "; ".join(f"{k.form}: {k.help}" for k in EMBEDDERS.values())


class Embedder:
    """A loaded model: `embed(texts) -> float32 (n, dim)` unit rows (a text without tokens gets a zero row).
    `chunk`: how many texts a shard hands it at once (a local model's tokenizer batch; all of them to a model that
    batches and schedules by itself)."""

    chunk = 32

    def __init__(self, spec: EmbedderSpec, impl: Any, weights_sha256: str, dim: int, version: str) -> None:
        self.spec, self._impl, self.weights_sha256, self.dim, self.version = spec, impl, weights_sha256, dim, version

    def identity(self) -> dict:
        """What an index records and a query embedder must match (settings + weights digest)."""
        return {
            "embedder": str(self.spec),
            **self.spec.to_json(),
            "dim": self.dim,
            "weights_sha256": self.weights_sha256,
        }

    def embed(self, texts: list[str]) -> np.ndarray:
        import numpy as np

        table, tokenizer = self._impl
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, enc in enumerate(tokenizer.encode_batch(list(texts), add_special_tokens=False)):
            ids = np.asarray(enc.ids, dtype=np.int64)
            if self.spec.max_tokens:
                ids = ids[: self.spec.max_tokens]
            if ids.size:
                np.clip(ids, 0, table.shape[0] - 1, out=ids)  # as wordllama does for ids past its table
                out[i] = table[ids].sum(axis=0, dtype=np.float32) / ids.size
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)
        return out


def load_embedder(spec: EmbedderSpec | str | None, endpoint: Any = None) -> Embedder:
    """The model of `spec`, loaded once per process (Ray workers and pool processes reuse it across shards);
    `endpoint`: the LLMConfig a remote kind calls (base URL, key variable, limits)."""
    spec = spec if isinstance(spec, EmbedderSpec) else parse_embedder(spec)
    if spec not in _LOADED:
        kind = EMBEDDERS.lookup(spec.kind)
        if kind.remote:  # not kept: each caller's endpoint, and its HTTP session's loop, are its own
            return kind.load(spec, endpoint)
        _LOADED[spec] = kind.load(spec)
    return _LOADED[spec]


def _load_wordllama(spec: EmbedderSpec) -> Embedder:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        import wordllama
        from wordllama import WordLlama
    except ImportError:
        raise MissingExtraError(f"the dense and hybrid retrievers need wordllama: {DENSE_EXTRA}") from None
    finally:  # wordllama.inference calls logging.basicConfig(INFO) at import: undo it, the command owns logging
        for h in root.handlers[len(handlers) :]:
            root.removeHandler(h)
        root.setLevel(level)
    uri = getattr(WordLlama._wordllama, spec.name, None)
    if uri is None:
        raise ConfigError(f"embedder {spec}: unknown wordllama config {spec.name!r} (known: l2_supercat, l3_supercat)")
    pkg = Path(wordllama.__file__).parent
    bundled = pkg / "tokenizers" / uri.tokenizer_config
    weights = pkg / "weights" / WordLlama.get_filename(spec.name, spec.dim)
    if not bundled.is_file() or not weights.is_file():
        raise ConfigError(
            f"embedder {spec}: wordllama {module_version(wordllama)} bundles no {weights.name} and "
            f"{bundled.name} in {pkg}; the offline model is l2_supercat at 256 dimensions"
        )
    tok_dir = cache_dir() / "wordllama" / "tokenizers"  # the user's private cache root (0700, checked), never /tmp
    tok_dir.mkdir(parents=True, exist_ok=True)
    copy = tok_dir / bundled.name
    if copy.is_symlink() or not copy.is_file() or copy.read_bytes() != bundled.read_bytes():  # whatever is there
        tmp = tok_dir / f".{bundled.name}.{os.getpid()}"
        shutil.copyfile(bundled, tmp)
        tmp.replace(copy)
    model = WordLlama.load(spec.name, cache_dir=tok_dir.parent, dim=spec.dim, disable_download=True)
    tokenizer = model.tokenizer
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return Embedder(spec, (model.embedding, tokenizer), file_sha256(weights), spec.dim, module_version(wordllama))


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def module_version(module: Any) -> str:
    return str(getattr(module, "__version__", "") or "unknown")


EMBEDDERS: Registry[EmbedderKind] = Registry(
    "embedder",
    [
        EmbedderKind(
            name="wordllama", parse=_parse_wordllama, load=_load_wordllama,
            spell=lambda s: f"wordllama:{s.name}:{s.dim}", form="wordllama[:config[:dim]]",
            help="static token embeddings bundled in the wordllama wheel, offline (extra .[dense]), the default",
        ),
        EmbedderKind(
            name="st", parse=_parse_st, load=Lazy("rise_batch.index.embed_st:load_st"),
            spell=lambda s: f"st:{s.name}", form="st:/model/dir",
            help="a local sentence-transformers model (GPU and fp16 where there is one; --gpus with --ray)",
        ),
        EmbedderKind(
            name="openai", parse=_parse_openai, load=Lazy("rise_batch.index.embed_remote:load_remote"),
            spell=lambda s: f"openai:{s.name}" + (f":{s.dim}" if s.dim else ""), remote=True,
            form="openai:MODEL[:DIM]",
            help="POST {--base-url}/embeddings of any OpenAI-compatible server (vLLM, TEI, llama.cpp, OpenAI), "
            "rate-limited, retried and priced as every model call",
        ),
    ],
)  # fmt: skip
