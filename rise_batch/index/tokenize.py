"""Per-shard tokenization: the one function the process pool and the Ray tasks both run.

Tokens must be exactly those of `bm25s.tokenize(texts, stopwords="en", stemmer=Stemmer("english"))` (the paper's
pipeline), because the point of the sharded build is to produce *the same index*. Stock bm25s runs the regex
`(?u)\\b\\w\\w+\\b` over the text and loops over every token in Python, which is the bulk of its build time.
Here each shard instead:

* splits the lowercased UTF-8 bytes on ASCII non-word bytes with `bytes.translate` + `split` (C speed; the regex
  is only run on the rare chunks that contain non-ASCII characters, where Unicode decides what a word is);
* counts chunks per document with `Counter` (C), so Python-level work is per *distinct* chunk, not per token;
* emits (row, term, count) arrays with a shard-local vocabulary in first-appearance order, which is what the merge
  needs to rebuild stock bm25s's vocabulary order.

Stemmer objects (PyStemmer) do not pickle, so they are built inside the worker from the settings.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import re
import types
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from rise_batch.index.plan import read_shard_docs

if TYPE_CHECKING:
    import numpy as np

    from rise_batch.corpus.readers import ShardSpec
    from rise_batch.types import BadRow, Doc

DEFAULT_TOKEN_PATTERN = r"(?u)\b\w\w+\b"

# ASCII bytes that are not \w become spaces; \w bytes and every byte >= 0x80 (parts of non-ASCII characters)
# are kept, so a chunk is either a pure-ASCII word or a piece that the Unicode regex must look at.
_SPLIT_TABLE = bytes(b if b >= 0x80 or chr(b).isalnum() or b == 0x5F else 0x20 for b in range(256))


@dataclass(frozen=True)
class TokenizerSettings:
    """Everything that decides which terms a text yields; saved in meta.json so queries match documents."""

    lower: bool = True
    token_pattern: str = DEFAULT_TOKEN_PATTERN
    stopwords: str = "en"
    stemmer: str | None = "english"

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> TokenizerSettings:
        return cls(**{k: d[k] for k in ("lower", "token_pattern", "stopwords", "stemmer") if k in d})

    def stopword_set(self) -> frozenset[str]:
        if self.stopwords in ("en", "english"):
            return frozenset(_bm25s_stopwords().STOPWORDS_EN)
        from bm25s.tokenization import _infer_stopwords  # other languages / lists: bm25s's own resolution

        return frozenset(_infer_stopwords(self.stopwords))

    def stem_function(self) -> Callable[[str], str] | None:
        if self.stemmer is None:
            return None
        import Stemmer

        # PyStemmer's own LRU cache costs more than it saves here; callers cache per distinct word.
        return Stemmer.Stemmer(self.stemmer, 0).stemWord


@functools.cache
def _bm25s_stopwords() -> types.ModuleType:
    """bm25s's stopwords module, loaded from its file without running `bm25s/__init__`.

    The package import pulls in numba and scipy: 80 MB and 1-2 s in every tokenizer worker, for one word list.
    """
    spec = importlib.util.find_spec("bm25s")
    assert spec is not None and spec.submodule_search_locations
    path = Path(spec.submodule_search_locations[0]) / "stopwords.py"
    mod_spec = importlib.util.spec_from_file_location("_rise_batch_bm25s_stopwords", path)
    assert mod_spec is not None and mod_spec.loader is not None
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return module


def query_tokenizer(settings: TokenizerSettings) -> Callable[[str], list[str]]:
    """Text -> terms, the plain way (regex, stopwords, stem); duplicates are kept, as stock bm25s keeps them."""
    split = re.compile(settings.token_pattern).findall
    stop = settings.stopword_set()
    stem = settings.stem_function() or (lambda w: w)
    cache: dict[str, str] = {}

    def terms(text: str) -> list[str]:
        out = []
        for w in split(text.lower() if settings.lower else text):
            if w in stop:
                continue
            s = cache.get(w)
            if s is None:
                s = cache[w] = stem(w)
            out.append(s)
        return out

    return terms


class ShardSummary(NamedTuple):
    """What the merge needs from a shard before any posting: small, so it travels by pickle or Ray."""

    shard_id: int
    docids: list[str]
    lengths: np.ndarray  # int64, terms per document after stopwords (stock's doc_len)
    vocab: list[str]  # shard-local terms in first-appearance order
    df: np.ndarray  # int64, documents of this shard containing each local term
    digests: bytes  # 16 bytes per document: blake2b(docid NUL text)
    n_chars: int
    source_rows: np.ndarray  # int64, row of each document in its source file (for error messages)
    bad_rows: list[BadRow]  # rows refused under on_bad_row="skip"


def doc_digest(docid: str, text: str) -> bytes:
    """16 bytes identifying a document's content: blake2b(docid NUL text). An index's corpus fingerprint is the
    sha256 of these in row order, computed alike by the BM25 and the dense builds."""
    h = hashlib.blake2b(docid.encode("utf-8", "surrogatepass") + b"\0", digest_size=16)
    h.update(text.encode("utf-8", "surrogatepass"))
    return h.digest()


class ShardPostings(NamedTuple):
    """(row, term, tf) triples of one shard, sorted by (row, term); row and term are shard-local."""

    rows: np.ndarray  # int32
    terms: np.ndarray  # int32
    tfs: np.ndarray  # int32


class _ShardVocab(dict):
    """Chunk -> local term id: >= 0 a term, -1 no term (stopword, 1 char), <= -2 several terms (see `multi`).

    A dict whose `__missing__` learns the chunk, so `map(vocab.__getitem__, counts)` stays in C for known chunks
    and meets new ones in first-appearance order, which hands out new term ids in that order.
    """

    def __init__(self, settings: TokenizerSettings) -> None:
        super().__init__()
        self.fast = settings.token_pattern == DEFAULT_TOKEN_PATTERN
        self.regex = re.compile(settings.token_pattern).findall
        self.stop = settings.stopword_set()
        self.stem = settings.stem_function() or (lambda w: w)
        self.lower = settings.lower
        self.term_id: dict[str, int] = {}
        self.vocab: list[str] = []
        self.multi: list[list[int]] = []

    def chunks(self, text: str) -> list:
        if self.lower:
            text = text.lower()
        if not self.fast:
            return self.regex(text)
        return text.encode("utf-8", "surrogatepass").translate(_SPLIT_TABLE).split()

    def _words(self, chunk: bytes | str) -> list[str]:
        if not self.fast:
            return [chunk]  # the regex already produced exactly one token
        if chunk.isascii():
            return [chunk.decode("ascii")] if len(chunk) > 1 else []
        return self.regex(chunk.decode("utf-8", "surrogatepass"))

    def __missing__(self, chunk: bytes | str) -> int:
        ids = []
        for w in self._words(chunk):
            if w in self.stop:
                continue
            s = self.stem(w)
            tid = self.term_id.get(s)
            if tid is None:
                tid = self.term_id[s] = len(self.vocab)
                self.vocab.append(s)
            ids.append(tid)
        if not ids:
            cid = -1
        elif len(ids) == 1:
            cid = ids[0]
        else:
            self.multi.append(ids)
            cid = -1 - len(self.multi)
        self[chunk] = cid
        return cid


BLOCK_DOCS = 256  # documents per numpy pass: bounds the temporaries whatever the shard size


def tokenize_docs(
    docs: Iterable[Doc], settings: TokenizerSettings, shard_id: int = 0
) -> tuple[ShardSummary, ShardPostings]:
    """Tokenize documents in order into a shard summary and its postings (see module docstring)."""
    import numpy as np

    sv = _ShardVocab(settings)
    lookup = sv.__getitem__
    docids: list[str] = []
    source_rows: list[int] = []
    digests = bytearray()
    ids_buf: list[int] = []
    cnt_buf: list[int] = []
    ndist: list[int] = []
    parts: list[tuple[np.ndarray, ...]] = []
    n_chars = 0
    for doc in docs:
        docids.append(doc.docid)
        source_rows.append(doc.row)
        n_chars += len(doc.text)
        digests += doc_digest(doc.docid, doc.text)
        counts = Counter(sv.chunks(doc.text))
        ids_buf.extend(map(lookup, counts))
        cnt_buf.extend(counts.values())
        ndist.append(len(counts))
        if len(ndist) == BLOCK_DOCS:
            parts.append(_block_postings(ids_buf, cnt_buf, ndist, len(docids) - len(ndist), sv))
            ids_buf, cnt_buf, ndist = [], [], []
    parts.append(_block_postings(ids_buf, cnt_buf, ndist, len(docids) - len(ndist), sv))
    rows, terms, tfs, lengths = (np.concatenate(x) for x in zip(*parts, strict=True))
    del parts
    df = np.bincount(terms, minlength=len(sv.vocab)).astype(np.int64)
    summary = ShardSummary(
        shard_id, docids, lengths, sv.vocab, df, bytes(digests), n_chars, np.array(source_rows, np.int64), []
    )
    return summary, ShardPostings(rows, terms, tfs)


def _block_postings(
    ids_buf: list[int], cnt_buf: list[int], ndist: list[int], first_row: int, sv: _ShardVocab
) -> tuple[np.ndarray, ...]:
    """(rows, terms, tfs, lengths) of a block of documents from their per-chunk term ids and counts."""
    import numpy as np

    n_docs = len(ndist)
    ids = np.array(ids_buf, dtype=np.int64)
    cnts = np.array(cnt_buf, dtype=np.int64)
    rows = np.repeat(np.arange(n_docs, dtype=np.int64), np.array(ndist, dtype=np.int64))
    if sv.multi:
        rows, ids, cnts = _expand_multi(rows, ids, cnts, sv.multi)
    keep = ids >= 0
    rows, ids, cnts = rows[keep], ids[keep], cnts[keep]
    lengths = np.bincount(rows, weights=cnts, minlength=n_docs).astype(np.int64)
    v = max(len(sv.vocab), 1)
    # Several chunks of a document may map to one term (e.g. "run", "runs"): sum them per (row, term).
    keys, inverse = np.unique(rows * v + ids, return_inverse=True)
    tfs = np.bincount(inverse, weights=cnts, minlength=len(keys)).astype(np.int32)
    return (
        (keys // v + first_row).astype(np.int32),
        (keys % v).astype(np.int32),
        tfs,
        lengths,
    )


def _expand_multi(rows: np.ndarray, ids: np.ndarray, cnts: np.ndarray, multi: list[list[int]]):
    """Replace each multi-term chunk (id <= -2) by one entry per term it holds (rare: non-ASCII joiners)."""
    import numpy as np

    at = np.flatnonzero(ids <= -2)
    extra_rows, extra_ids, extra_cnts = [], [], []
    for i in at.tolist():
        for tid in multi[-2 - int(ids[i])]:
            extra_rows.append(rows[i])
            extra_ids.append(tid)
            extra_cnts.append(cnts[i])
    return (
        np.concatenate([rows, np.asarray(extra_rows, np.int64)]),
        np.concatenate([ids, np.asarray(extra_ids, np.int64)]),
        np.concatenate([cnts, np.asarray(extra_cnts, np.int64)]),
    )


def tokenize_shard(
    spec: ShardSpec, settings: TokenizerSettings, on_bad_row: str = "error"
) -> tuple[ShardSummary, ShardPostings]:
    """Read one shard of the corpus and tokenize it; the shared per-shard function of local and Ray builds."""
    bad: list[BadRow] = []
    summary, postings = tokenize_docs(read_shard_docs(spec, on_bad_row, bad), settings, spec.shard_id)
    return summary._replace(bad_rows=bad), postings
