"""Load an index (memory-mapped) and search it with several queries at once.

Stock `BM25.retrieve` raises when k exceeds the corpus and pads with score-0 documents in arbitrary order when
fewer than k match; a query whose terms are all unknown scores every document 0. `search` clamps k, drops the
padding and answers such queries with empty Hits, so callers can take every hit at face value.
"""

from __future__ import annotations

import json
import threading
import warnings
from pathlib import Path
from typing import NamedTuple

from rise_batch.index.build import DOCIDS_FILE, IndexMeta
from rise_batch.index.tokenize import query_tokenizer

# numba's default "workqueue" threading layer aborts on concurrent parallel calls; serialize those.
_PARALLEL_LOCK = threading.Lock()


class Hits(NamedTuple):
    """One query's results, best first; only documents that match at least one query term."""

    docids: list[str]
    scores: list[float]


class BM25Index:
    """A built index: `search(queries, k)`, `docids` (row order), `len(index)`, `meta`."""

    def __init__(self, index_dir: str | Path, backend: str = "auto", n_threads: int = 1, warmup: bool = True):
        import bm25s

        self.path = Path(index_dir)
        self.meta = IndexMeta.read(self.path)
        if self.meta.bm25s_version != bm25s.__version__:
            warnings.warn(
                f"{self.path}: built with bm25s {self.meta.bm25s_version}, loading with {bm25s.__version__}",
                stacklevel=2,
            )
        if backend == "auto":
            backend = "numba" if bm25s.NUMBA_AVAILABLE else "numpy"
        self.backend = backend
        self.n_threads = _numba_threads(n_threads) if backend == "numba" else 0
        self._model = bm25s.BM25.load(self.path, mmap=True, backend=backend, show_progress=False)
        self.docids: list[str] = json.loads((self.path / DOCIDS_FILE).read_text())
        if len(self.docids) != self._model.scores["num_docs"]:
            raise ValueError(f"{self.path}: {len(self.docids)} docids for {self._model.scores['num_docs']} rows")
        self._vocab: dict[str, int] = self._model.vocab_dict
        self._terms = query_tokenizer(self.meta.tokenizer)
        if warmup:
            self.warmup()

    def __len__(self) -> int:
        return len(self.docids)

    def warmup(self) -> None:
        """Compile numba's scorer now (or load it from numba's disk cache), not inside the first timed search."""
        some = next((i for t, i in self._vocab.items() if t), None)
        if some is not None and self.docids:
            self._retrieve([[some]], 1)

    def query_term_ids(self, query: str) -> list[int]:
        """Vocabulary ids of a query's terms, repeats kept (a repeated term counts twice, as in stock)."""
        vocab = self._vocab
        return [vocab[t] for t in self._terms(query) if t in vocab]

    def search(self, queries: list[str], k: int) -> list[Hits]:
        """Top-k documents per query, best first; k is clamped to the corpus size."""
        if isinstance(queries, str):
            raise TypeError("search() takes a list of queries")
        ids = [self.query_term_ids(q) for q in queries]
        out = [Hits([], []) for _ in queries]
        todo = [i for i, x in enumerate(ids) if x]
        k = min(int(k), len(self.docids))
        if k <= 0 or not todo:
            return out
        docs, scores = self._retrieve([ids[i] for i in todo], k)
        for j, i in enumerate(todo):
            keep = scores[j] > 0
            rows = docs[j][keep].tolist()
            out[i] = Hits([self.docids[r] for r in rows], scores[j][keep].tolist())
        return out

    def _retrieve(self, ids: list[list[int]], k: int):
        kw = dict(k=k, sorted=True, show_progress=False, n_threads=self.n_threads, return_as="tuple")
        if self.n_threads > 1:
            with _PARALLEL_LOCK:
                return self._model.retrieve(ids, **kw)
        return self._model.retrieve(ids, **kw)


def _numba_threads(requested: int) -> int:
    """Threads for bm25s's numba retrieval; single-threaded unless asked, and then cached on disk.

    bm25s compiles its retrieval on first use in every process: 7 s on a quiet machine, 30-40 s on a busy one.
    We turn on numba's on-disk cache so later processes (Ray actors, CLI calls) load the machine code instead.
    bm25s's serial and parallel variants share one cache file name, so only one may be cached: the serial one.
    It is also the robust default: the parallel variant's threads meet at a barrier, which costs 4x the latency
    when the cores are busy with other work (measured on 2 cores), and concurrent searches then serialize on a
    lock; with the serial variant, concurrent searches from several threads simply run side by side (nogil).
    """
    import numba
    from bm25s.numba import retrieve_utils

    n = max(1, min(requested or 1, numba.config.NUMBA_NUM_THREADS))
    f = retrieve_utils._retrieve_internal_jitted_serial
    if n == 1 and not getattr(f, "_rise_cached", False):
        f.enable_caching()
        f._rise_cached = True
    return n


def load_index(index_dir: str | Path, **kw) -> BM25Index:
    """Open an index built by `build_index` (arrays memory-mapped; numba compiled or loaded from its cache)."""
    return BM25Index(index_dir, **kw)
