"""Load an index (memory-mapped) and search it with several queries at once.

Stock `BM25.retrieve` raises when k exceeds the corpus and pads with score-0 documents in arbitrary order when
fewer than k match; a query whose terms are all unknown scores every document 0. `search` clamps k, drops the
padding and answers such queries with empty Hits, so callers can take every hit at face value.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, NamedTuple

from rise_batch.cache import cache_dir as root_of
from rise_batch.cache_objects import fetch_objects
from rise_batch.index.build import IndexMeta
from rise_batch.index.retriever_kinds import index_marker as index_marker  # re-exported: the done marker
from rise_batch.index.tables import docid_table, vocabulary
from rise_batch.index.tokenize import query_tokenizer
from rise_batch.index.topk import search_arrays
from rise_batch.safe_read import RefusedFile, load_npy, read_json_file
from rise_batch.storage import ObjectPath, location

PARAMS_FILE = "params.index.json"  # bm25s's names


class Hits(NamedTuple):
    """One query's results, best first; only documents that match at least one query term."""

    docids: list[str]
    scores: list[float]


def clamp_k(queries: list[str], k: int, n_docs: int) -> int:
    """Every retriever's argument check: a list of queries (a bare string would be searched letter by letter), and
    k clamped to the corpus size (<= 0 means every query gets empty Hits)."""
    if isinstance(queries, str):
        raise TypeError("search() takes a list of queries")
    return min(int(k), n_docs)


class BM25Index:
    """A built index: `search(queries, k)`, `docids` (row order), `len(index)`, `meta`.

    Everything is memory-mapped, shared with the other processes of the node that open the same directory: bm25s's
    arrays, the docids and the vocabulary (rise_batch.index.tables; bm25s's own JSON vocabulary and its set of ids
    are not loaded).

    backend "numpy" (the default, also "auto") scores in plain numpy (rise_batch/index/topk.py): the process imports
    neither bm25s nor numba, ~45 MB less private memory in every trajectory actor. "numba" runs bm25s's numba kernel
    without the GIL: the same scores and the same documents above the k-th score, equal scores in the kernel's
    order. Either way the queries of one call run on up to `threads` threads, and searches from several caller
    threads run side by side.
    """

    def __init__(self, index_dir: str | Path, backend: str = "auto", warmup: bool = True, threads: int = 0):
        import os
        from importlib.metadata import version

        self.path = Path(index_dir)
        self.meta = IndexMeta.read(self.path)
        have = version("bm25s")  # the installed version, without importing bm25s (and numba, scipy) here
        if self.meta.bm25s_version != have:
            warnings.warn(f"{self.path}: built with bm25s {self.meta.bm25s_version}, loading with {have}", stacklevel=2)
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        self.backend = "numpy" if backend == "auto" else backend
        self.threads = max(1, threads or min(4, os.cpu_count() or 1))
        self._pool = None
        self._arrays = load_arrays(self.path, self.meta)
        self.docids = docid_table(self.path)
        if len(self.docids) != self._arrays["num_docs"]:
            raise ValueError(f"{self.path}: {len(self.docids)} docids for {self._arrays['num_docs']} rows")
        self._vocab = vocabulary(self.path)
        self._terms = query_tokenizer(self.meta.tokenizer)
        if warmup:
            self.warmup()

    def __len__(self) -> int:
        return len(self.docids)

    def warmup(self) -> None:
        """One search now, not inside the first timed one: numba's kernel compiled (or loaded from numba's disk
        cache); numpy's first call pays its own set-up."""
        terms = self._vocab.terms
        some = next((i for i in range(len(terms)) if terms[i]), None)
        if some is not None and self.docids:
            self._retrieve([[some]], 1)

    def query_term_ids(self, query: str) -> list[int]:
        """Vocabulary ids of a query's terms, repeats kept (a repeated term counts twice, as in stock)."""
        find = self._vocab.terms.find
        return [i for i in map(find, self._terms(query)) if i is not None]

    def search(self, queries: list[str], k: int) -> list[Hits]:
        """Top-k documents per query, best first; k is clamped to the corpus size."""
        k = clamp_k(queries, k, len(self.docids))
        ids = [self.query_term_ids(q) for q in queries]
        out = [Hits([], []) for _ in queries]
        todo = [i for i, x in enumerate(ids) if x]
        if k <= 0 or not todo:
            return out
        docs, scores = self._retrieve([ids[i] for i in todo], k)
        for j, i in enumerate(todo):
            keep = scores[j] > 0
            out[i] = Hits(self.docids.take_many(docs[j][keep]), scores[j][keep].tolist())
        return out

    def _retrieve(self, ids: list[list[int]], k: int):
        """(rows, scores) per query, best first: numpy's arrays hold only matches, the kernel's are padded to k."""
        one = _numba_one if self.backend == "numba" else search_arrays
        arrays = self._arrays
        if len(ids) == 1 or self.threads == 1:
            parts = [one(arrays, q, k) for q in ids]
        else:
            if self._pool is None:
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="bm25")
            parts = list(self._pool.map(lambda q: one(arrays, q, k), ids))
        return [p[0] for p in parts], [p[1] for p in parts]


BACKENDS = ("auto", "numpy", "numba")


def load_arrays(path: Path, meta: IndexMeta) -> dict[str, Any]:
    """The score matrix's arrays (`data`, `indices`, `indptr`, `num_docs`), as `bm25s.BM25.load(path, mmap=True)`
    maps them, each file opened as a document is (safe_read): a FIFO, a device or a link in the index is refused at
    once, naming it, where bm25s would block or read without end. The arrays are mapped from the checked files, of
    the lengths meta.json records. The parameters file must be this index's (bm25s's search reads nothing else of
    it: the scores are precomputed)."""
    params = read_json_file(path / PARAMS_FILE, below=path)
    if not isinstance(params, dict) or params.get("num_docs") != meta.n_docs:
        raise RefusedFile(f"{path / PARAMS_FILE}: not the parameters of this index ({meta.n_docs} documents)")
    n, terms = meta.counts["n_postings"], meta.counts["n_terms"]
    arrays = {
        name: load_npy(path / f"{name}.csc.index.npy", below=path, length=size)
        for name, size in (("data", n), ("indices", n), ("indptr", terms + 1))
    }
    if int(arrays["indptr"][-1]) != n:
        raise RefusedFile(f"{path / 'indptr.csc.index.npy'}: does not end at the {n} postings meta.json records")
    return {**arrays, "num_docs": meta.n_docs}


def _numba_one(arrays: dict, term_ids: list[int], k: int):
    rows, scores = _serial_numba_retrieve(arrays, [term_ids], k)
    return rows[0], scores[0]


_SERIAL = None


def _serial_numba_retrieve(scores: dict, ids: list[list[int]], k: int):
    """bm25s's own numba retrieval kernel, single-threaded, with its machine code cached on disk.

    bm25s compiles this kernel on first use in every process: 7 s on a quiet machine, 30-40 s on a busy one, in
    every Ray actor and CLI call. numba's disk cache fixes that, but bm25s's serial and parallel dispatchers share
    one cache file name (numba's cache key ignores the parallel flag), so we compile our own dispatcher of the same
    kernel under a name of its own and call it the way `bm25s.numba.retrieve_utils` does. We use the serial kernel
    only: the parallel one's threads meet at a barrier, which cost 4x the latency when the cores were busy with
    other work (measured on 2 cores), while serial searches from several threads run side by side (nogil).
    """
    global _SERIAL
    import numpy as np

    if _SERIAL is None:
        import types

        import numba
        from bm25s.numba import retrieve_utils

        kernel = retrieve_utils._retrieve_internal_jitted_serial.py_func
        fn = types.FunctionType(kernel.__code__, kernel.__globals__, "_rise_batch_retrieve_serial")
        fn.__qualname__ = "_rise_batch_retrieve_serial"
        _SERIAL = numba.njit(nogil=True, cache=True)(fn)
    pointers = np.cumsum([0] + [len(q) for q in ids], dtype=np.int32)
    flat = np.concatenate([np.asarray(q, dtype=np.int32) for q in ids])
    top_scores, top_rows = _SERIAL(
        query_tokens_ids_flat=flat,
        query_pointers=pointers,
        k=k,
        sorted=True,
        dtype=np.dtype("float32"),
        int_dtype=np.dtype("int32"),
        data=scores["data"],
        indptr=scores["indptr"],
        indices=scores["indices"],
        num_docs=scores["num_docs"],
        nonoccurrence_array=None,
        weight_mask=None,
    )
    return top_rows, top_scores


def load_index(index_dir: str | Path, **kw) -> BM25Index:
    """Open an index built by `build_index` (arrays memory-mapped; numba compiled or loaded from its cache); one in
    object storage from a verified local copy."""
    return BM25Index(local_index(index_dir), **kw)


def local_index(index_dir: str | Path, cache_dir: str | Path | None = None) -> str | Path:
    """`index_dir` itself on a POSIX path; for an index in object storage, a verified local copy of it (memory-mapped
    arrays need a file), made once per node under the cache (rise_batch/cache.py) and reused while the objects are
    unchanged."""
    loc = location(index_dir)
    if not isinstance(loc, ObjectPath):
        return index_dir
    return str(fetch_objects(loc, root_of(cache_dir), "index", index_marker(loc)).path)
