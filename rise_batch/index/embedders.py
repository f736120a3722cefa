"""Embedding models for the dense retriever: wordllama offline (the default) or a local sentence-transformers model.

An embedder is named by a spec string (`--embedder`, config key `embedder`):
  `wordllama` = `wordllama:l2_supercat:256`   static token embeddings bundled in the wordllama wheel (`.[dense]`)
  `st:/path/to/model`                          a sentence-transformers model directory (GPU if torch sees one)
and, after a colon-free `@N` suffix, the tokens kept per document (`wordllama@2048`; 0, the default, keeps all).

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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rise_batch.cache import cache_dir
from rise_batch.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

DEFAULT_EMBEDDER = "wordllama:l2_supercat:256"
DENSE_EXTRA = "pip install 'rise_batch[dense]' (or pip install wordllama)"
_LOADED: dict[EmbedderSpec, Embedder] = {}


class MissingExtraError(ConfigError):
    """An optional dependency the asked-for retriever needs is not installed (exit 2, with the install line)."""


@dataclass(frozen=True)
class EmbedderSpec:
    """Which model embeds documents and queries. kind: "wordllama" or "st" (sentence-transformers)."""

    kind: str
    name: str
    dim: int = 0  # wordllama: the weights' dimension; st: filled from the model once loaded
    max_tokens: int = 0  # tokens kept per document (0 = all)

    def __str__(self) -> str:
        base = f"wordllama:{self.name}:{self.dim}" if self.kind == "wordllama" else f"st:{self.name}"
        return base + (f"@{self.max_tokens}" if self.max_tokens else "")

    def to_json(self) -> dict:
        return asdict(self)


def parse_embedder(text: str | None) -> EmbedderSpec:
    """`wordllama[:config[:dim]][@max_tokens]` or `st:PATH[@max_tokens]`; a one-line ConfigError otherwise."""
    text = (text or DEFAULT_EMBEDDER).strip()
    base, _, cut = text.rpartition("@") if "@" in text else (text, "", "")
    try:
        max_tokens = int(cut) if cut else 0
    except ValueError:
        raise ConfigError(f"embedder {text!r}: the part after @ must be a token count, got {cut!r}") from None
    if max_tokens < 0:
        raise ConfigError(f"embedder {text!r}: max tokens must be >= 0")
    kind, _, rest = base.partition(":")
    if kind == "wordllama":
        config, _, dim = rest.partition(":")
        try:
            return EmbedderSpec("wordllama", config or "l2_supercat", int(dim or 256), max_tokens)
        except ValueError:
            raise ConfigError(f"embedder {text!r}: dimension must be an integer, got {dim!r}") from None
    if kind == "st" and rest:
        return EmbedderSpec("st", str(Path(rest).expanduser().resolve()), 0, max_tokens)
    raise ConfigError(
        f"embedder {text!r}: expected wordllama[:config[:dim]] or st:/path/to/sentence-transformers-model "
        "(optionally @max_tokens)"
    )


class Embedder:
    """A loaded model: `embed(texts) -> float32 (n, dim)` unit rows (a text without tokens gets a zero row)."""

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

        if self.spec.kind == "st":
            out = self._impl.encode(list(texts), normalize_embeddings=True, convert_to_numpy=True)
            return np.asarray(out, dtype=np.float32).reshape(len(texts), self.dim)
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


def load_embedder(spec: EmbedderSpec | str | None) -> Embedder:
    """The model of `spec`, loaded once per process (Ray workers and pool processes reuse it across shards)."""
    spec = spec if isinstance(spec, EmbedderSpec) else parse_embedder(spec)
    if spec not in _LOADED:
        _LOADED[spec] = _load_wordllama(spec) if spec.kind == "wordllama" else _load_st(spec)
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
            f"embedder {spec}: wordllama {_version(wordllama)} bundles no {weights.name} and "
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
    return Embedder(spec, (model.embedding, tokenizer), _sha256(weights), spec.dim, _version(wordllama))


def _load_st(spec: EmbedderSpec) -> Embedder:
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise MissingExtraError(
            f"embedder {spec}: needs sentence-transformers (pip install sentence-transformers)"
        ) from None
    path = Path(spec.name)
    if not path.is_dir():
        raise ConfigError(f"embedder {spec}: {path} is not a local sentence-transformers model directory")
    model = SentenceTransformer(str(path), local_files_only=True)
    if spec.max_tokens:
        model.max_seq_length = spec.max_tokens
    digest = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in (".safetensors", ".bin", ".json")):
        digest.update(f.relative_to(path).as_posix().encode() + b"\0" + _sha256(f).encode())
    dim = int(model.get_sentence_embedding_dimension())
    spec2 = EmbedderSpec(spec.kind, spec.name, dim, spec.max_tokens)
    import sentence_transformers

    return Embedder(spec2, model, digest.hexdigest(), dim, _version(sentence_transformers))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _version(module: Any) -> str:
    return str(getattr(module, "__version__", "") or "unknown")
