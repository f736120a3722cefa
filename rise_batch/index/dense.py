"""The dense retriever: embed shards in parallel -> float16 .npy per shard -> one merged memmap; exact search.

Layout inside an index directory: `docids.json` (row -> docid, shared with the BM25 part when there is one) and
`dense/` holding `embeddings.npy` (float16, one unit row per passage), `passage_offsets.npy` (int64, n_docs + 1:
the passages of document i are rows offsets[i]:offsets[i+1], the passage -> document map; absent when the rule is
`doc`, one row per document) and `meta.json` (the embedder's identity: spec, dimension, weights digest; the
passage rule (rise_batch.index.passages); the corpus fingerprint, computed as the BM25 build computes it, so a
hybrid index can prove both parts cover the same documents in the same order; counts; build timing).

Search is exact: the query block (float32, unit rows) times the passage matrix in blocks of whole documents, each
document scored by its best passage (max cosine), a running top-k per query. 1M x 256 float16 is 512 MB
memory-mapped; a 64k-row block costs 64 MB of float32 at a time. No ANN library is needed at that size, and
exactness keeps the recall figures free of an approximation.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from rise_batch.errors import ConfigError
from rise_batch.executor.local import process_map
from rise_batch.index.build import DOCIDS_FILE
from rise_batch.index.dense_checkpoint import ShardCheckpoint, save_shard, shard_key, summary_json
from rise_batch.index.embed_remote import endpoint_config
from rise_batch.index.embedders import EMBEDDERS, EmbedderSpec, load_embedder, parse_embedder
from rise_batch.index.passages import PassageRule, parse_passages, split_passages
from rise_batch.index.plan import later_copy, plan_index_shards, read_shard_docs
from rise_batch.index.search import Hits, clamp_k
from rise_batch.index.tables import docid_table, write_docid_table
from rise_batch.index.tokenize import doc_digest
from rise_batch.safe_read import SOURCE_MAX_BYTES, load_npy, read_json_file
from rise_batch.types import BadRow

if TYPE_CHECKING:
    import numpy as np

    from rise_batch.corpus.readers import ShardSpec

DENSE_DIR = "dense"
DENSE_FORMAT = "rise_batch.dense/2"  # /1 (one row per document, no passage rule) is still read
OFFSETS_FILE = "passage_offsets.npy"
EMBED_BATCH = 32  # passages per tokenizer call


class DenseShard(NamedTuple):
    """What the merge needs from a shard besides its vectors (small: it travels by pickle or Ray)."""

    docids: list[str]
    source_rows: list[int]
    digests: bytes  # 16 bytes per document, blake2b(docid NUL text) as in the BM25 build
    bad_rows: list[BadRow]
    n_chars: int
    n_passages: list[int]  # per document, >= 1


def embed_shard(
    spec: ShardSpec, embedder: EmbedderSpec, on_bad_row: str, passages: PassageRule, model: Any = None
) -> tuple[DenseShard, np.ndarray]:
    """The per-shard function (local process or Ray task): read, check, cut into passages and embed one shard ->
    (summary, float16 passage rows in document order). `model`: the loaded embedder (else `embedder`'s, loaded
    once per process)."""
    import numpy as np

    model = model if model is not None else load_embedder(embedder)
    bad: list[BadRow] = []
    docids, rows, texts, counts, digests, n_chars = [], [], [], [], bytearray(), 0
    for doc in read_shard_docs(spec, on_bad_row, bad):
        docids.append(doc.docid)
        rows.append(doc.row)
        parts = split_passages(doc.text, passages)
        texts += parts
        counts.append(len(parts))
        n_chars += len(doc.text)
        digests += doc_digest(doc.docid, doc.text)
    vecs = np.zeros((len(texts), model.dim), dtype=np.float16)
    for i in range(0, len(texts), model.chunk):
        vecs[i : i + model.chunk] = model.embed(texts[i : i + model.chunk])
    return DenseShard(docids, rows, bytes(digests), bad, n_chars, counts), vecs


def embed_shard_to_disk(
    spec: ShardSpec, embedder: EmbedderSpec, on_bad_row: str, passages: PassageRule, path: str, model: Any = None
) -> tuple[DenseShard, str]:
    """Embed a shard into its checkpoint (`path`: its vectors' file; its summary beside, last): only the summary
    comes back by pipe, and a killed build finds the shard done."""
    cost0 = getattr(model, "cost_usd", 0.0)
    summary, vecs = embed_shard(spec, embedder, on_bad_row, passages, model)
    save_shard(path, vecs, summary_json(*summary, cost_usd=getattr(model, "cost_usd", 0.0) - cost0))
    return summary, path


def map_shards(
    shards: Sequence[ShardSpec],
    embedder: EmbedderSpec,
    on_bad_row: str,
    checkpoint: ShardCheckpoint,
    workers: int,
    ray: dict | None,
    passages: PassageRule,
    model: Any = None,
) -> Iterator[tuple[DenseShard, Callable[[], Any]]]:
    """(summary, fetch vectors) per shard in corpus order: finished shards from the checkpoint; the others embedded
    in this process by a remote embedder (`model`: its requests share one limiter and budget), else in spawned
    processes, or as Ray tasks when `ray` is given ({"address": ..., "num_gpus": ...}; num_gpus is asked of every
    task, so GPUs are honoured on a cluster). Each shard is checkpointed as it finishes."""
    done = {i: d for i in range(len(shards)) if (d := checkpoint.done(i)) is not None}
    todo = [i for i in range(len(shards)) if i not in done]
    fresh = _embed_pending(shards, todo, embedder, on_bad_row, checkpoint, workers, ray, passages, model)
    for i in range(len(shards)):
        if i in done:
            d = done[i]
            bad = [BadRow(*b) for b in d["bad_rows"]]
            digests = bytes.fromhex(d["digests"])
            summary = DenseShard(d["docids"], d["source_rows"], digests, bad, d["n_chars"], d["n_passages"])
            yield summary, lambda i=i: checkpoint.load(i)
        else:
            yield next(fresh)


def _embed_pending(
    shards: Sequence[ShardSpec],
    todo: list[int],
    embedder: EmbedderSpec,
    on_bad_row: str,
    checkpoint: ShardCheckpoint,
    workers: int,
    ray: dict | None,
    passages: PassageRule,
    model: Any,
) -> Iterator[tuple[DenseShard, Callable[[], Any]]]:
    """The shards `todo` embedded and checkpointed, in order."""
    if model is None and ray is not None:
        from rise_batch.executor.ray import init_ray, task_map  # lazy: loads ray (Ray runs only)

        init_ray(ray.get("address"), log_to_driver=False)
        opts = {"num_gpus": ray["num_gpus"]} if ray.get("num_gpus") else None
        items = [shards[i] for i in todo]
        results = task_map(embed_shard, items, embedder, on_bad_row, passages, options=opts)
        for i, (summary, fetch) in zip(todo, results, strict=True):
            save_shard(str(checkpoint.vectors_path(i)), fetch(), summary_json(*summary))
            yield summary, lambda i=i: checkpoint.load(i)
        return
    calls = [(shards[i], embedder, on_bad_row, passages, str(checkpoint.vectors_path(i))) for i in todo]
    if model is not None:  # a remote model: this process sends, shard after shard, each shard's requests at once
        results: Iterator[tuple[DenseShard, str]] = (embed_shard_to_disk(*call, model) for call in calls)
    else:
        results = process_map(embed_shard_to_disk, calls, workers)
    for (summary, _), i in zip(results, todo, strict=True):
        yield summary, lambda i=i: checkpoint.load(i)


def build_dense(
    corpus_path: str | Path,
    index_dir: str | Path,
    embedder: str | EmbedderSpec | None = None,
    *,
    workers: int = 2,
    shard_docs: int = 2000,
    on_bad_row: str = "error",
    columns: str = "",
    ray: dict | None = None,
    shards: Sequence[ShardSpec] | None = None,
    log: Callable[[str], None] | None = None,
    passages: str | PassageRule | None = None,
    remote: dict[str, Any] | None = None,
) -> dict:
    """Embed a corpus into `index_dir/dense/` (created beside a BM25 part, or in a new directory); returns meta.

    `passages` is the passage rule (None: DEFAULT_PASSAGES; "doc": one vector per document). Duplicate docids and
    bad rows follow `on_bad_row` exactly as the BM25 build does (the first copy is kept), so both parts hold the
    same rows; an existing `docids.json` (the BM25 part's) must equal the dense rows. `remote`: the keyword
    arguments a remote embedder is loaded with (`endpoint`, `budget`, `batch`). Finished shards are checkpointed
    (rise_batch.index.dense_checkpoint): a build killed midway, run again, embeds only the rest."""
    say = log or (lambda _msg: None)
    spec = embedder if isinstance(embedder, EmbedderSpec) else parse_embedder(embedder)
    rule = parse_passages(passages)
    kind = EMBEDDERS.lookup(spec.kind)
    # fail here, before any shard, when the extra is missing or the endpoint refuses
    model = kind.load(spec, **(remote or {})) if kind.remote else load_embedder(spec)
    out = Path(index_dir)
    if (out / DENSE_DIR).exists():
        raise FileExistsError(f"{out / DENSE_DIR}: exists (build into a new --out, or pass --overwrite)")
    t0 = time.perf_counter()
    shards = list(shards) if shards is not None else plan_index_shards(corpus_path, shard_docs, columns)
    out.mkdir(parents=True, exist_ok=True)
    checkpoint = ShardCheckpoint(out, shard_key(model.identity(), str(rule), on_bad_row, shards))
    tmp = checkpoint.dir / f"merge-{os.getpid()}"  # a kill leaves it in the checkpoint, which the end removes
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        mapped = map_shards(shards, spec, on_bad_row, checkpoint, workers, ray, rule, model if kind.remote else None)
        parts, keep = _embed_all(shards, on_bad_row, mapped)
        n = int(sum(int(m.sum()) for m in keep))
        t1 = time.perf_counter()
        rate = n / max(t1 - t0, 1e-9)
        say(f"embedded {n} docs in {len(shards)} shards ({rule}) in {t1 - t0:.1f}s ({rate:.0f} docs/s)")
        meta = _write_part(tmp, out, model, rule, str(corpus_path), parts, keep)
        meta["build"] = {
            "runner": "ray" if ray is not None and not kind.remote else "process",
            "workers": workers,
            "num_gpus": (ray or {}).get("num_gpus") or 0,
            "n_shards": len(shards),
            "embed_seconds": round(t1 - t0, 3),
            "seconds": round(time.perf_counter() - t0, 3),
            "docs_per_second": round(n / max(t1 - t0, 1e-9), 1),
            "library_version": model.version,
            **_spend(model, checkpoint, len(shards)),
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False))
        tmp.rename(out / DENSE_DIR)
        checkpoint.remove()
        return meta
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if kind.remote:
            model.close()


def _write_part(
    tmp: Path,
    out: Path,
    model: Any,
    rule: PassageRule,
    corpus_path: str,
    parts: list[tuple[DenseShard, Callable[[], Any]]],
    keep: list[np.ndarray],
) -> dict:
    """The merged vectors, offsets and docids of the kept rows into `tmp` (docids.json into `out` when the BM25
    part did not write it): the part's meta, without its build figures."""
    import numpy as np

    kept = [np.asarray(s.n_passages, dtype=np.int64)[m] for (s, _), m in zip(parts, keep, strict=True)]
    counts = np.concatenate(kept) if kept else np.zeros(0, dtype=np.int64)
    n_rows = int(counts.sum())
    docids, content = _merge_vectors(tmp / "embeddings.npy", parts, keep, (n_rows, model.dim))
    if rule.kind != "doc":
        np.save(tmp / OFFSETS_FILE, np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))
    _check_docids(out, docids)
    if not (out / DOCIDS_FILE).exists():
        (out / DOCIDS_FILE).write_text(json.dumps(docids, ensure_ascii=False))
        write_docid_table(out, docids)
    return _meta(model, rule, n_rows, corpus_path, content, parts, keep)


def _spend(model: Any, checkpoint: ShardCheckpoint, n_shards: int) -> dict:
    """A remote embedder's requests and dollars: this invocation's, and every finished shard's across resumes."""
    if not hasattr(model, "cost_usd"):
        return {}
    spent = sum(float((checkpoint.done(i) or {}).get("cost_usd", 0.0)) for i in range(n_shards))
    return {
        "requests": model.requests,
        "input_tokens": model.input_tokens,
        "cost_usd": round(model.cost_usd, 6),
        "shards_cost_usd": round(spent, 6),
    }


def _meta(
    model: Any,
    rule: PassageRule,
    n_rows: int,
    corpus_path: str,
    content: str,
    parts: list[tuple[DenseShard, Callable[[], Any]]],
    keep: list[np.ndarray],
) -> dict:
    """meta.json of a dense part: the model's identity, the passage rule, the corpus' digest and bad rows."""
    bad = [b for s, _ in parts for b in s.bad_rows]
    return {
        "format": DENSE_FORMAT,
        **model.identity(),
        "dtype": "float16",
        "n_docs": int(sum(int(m.sum()) for m in keep)),
        "passages": {"rule": str(rule), "n_passages": n_rows, "doc_score": "max"},
        "corpus": {
            "path": corpus_path,
            "content_sha256": content,
            "n_chars": sum(s.n_chars for s, _ in parts),
            "n_bad_rows": len(bad),
            "n_duplicates_skipped": int(sum(int((~m).sum()) for m in keep)),
            "bad_rows": [list(b) for b in bad[:100]],
        },
    }


def _embed_all(
    shards: list[ShardSpec], on_bad_row: str, mapped: Iterator[tuple[DenseShard, Callable[[], Any]]]
) -> tuple[list[tuple[DenseShard, Callable[[], Any]]], list[np.ndarray]]:
    """Every shard embedded: (summary, fetch vectors) per shard, and per shard the mask of rows kept (False: a
    later copy of a docid, left out as the BM25 build leaves it out)."""
    import numpy as np

    parts: list[tuple[DenseShard, Callable[[], Any]]] = []
    first: dict[str, tuple[int, int]] = {}
    keep: list[np.ndarray] = []
    for i, (summary, fetch) in enumerate(mapped):
        mask = np.ones(len(summary.docids), dtype=bool)
        for j, (docid, row) in enumerate(zip(summary.docids, summary.source_rows, strict=True)):
            mask[j] = not later_copy(first, docid, i, row, shards, on_bad_row)
        parts.append((summary, fetch))
        keep.append(mask)
    return parts, keep


def _merge_vectors(
    path: Path, parts: list[tuple[DenseShard, Callable[[], Any]]], keep: list[np.ndarray], shape: tuple[int, int]
) -> tuple[list[str], str]:
    """The kept documents' passage vectors into one float16 .npy of `shape` at `path`, in corpus order: (the kept
    docids, content digest)."""
    import numpy as np

    merged = np.lib.format.open_memmap(path, mode="w+", dtype=np.float16, shape=shape)
    docids: list[str] = []
    content = hashlib.sha256()
    at = 0
    for (summary, fetch), mask in zip(parts, keep, strict=True):
        vecs = np.asarray(fetch())[np.repeat(mask, np.asarray(summary.n_passages, dtype=np.int64))]
        merged[at : at + len(vecs)] = vecs
        at += len(vecs)
        docids += [d for d, m in zip(summary.docids, mask.tolist(), strict=True) if m]
        digests = np.frombuffer(summary.digests, dtype=np.uint8).reshape(-1, 16)[mask]
        content.update(digests.tobytes())
    merged.flush()
    del merged
    return docids, content.hexdigest()


def _check_docids(out: Path, docids: list[str]) -> None:
    p = out / DOCIDS_FILE
    if p.exists():
        have = read_json_file(p, below=out, max_bytes=SOURCE_MAX_BYTES)
        if have != docids:
            where = next(
                (i for i, (a, b) in enumerate(zip(have, docids, strict=False)) if a != b), min(len(have), len(docids))
            )
            raise ValueError(
                f"{p}: the BM25 part's {len(have)} docids differ from the dense part's {len(docids)} (first at row "
                f"{where}): both parts must be built from the same corpus with the same --on-bad-row"
            )


class DenseIndex:
    """The dense part of an index directory: `search(queries, k)` by exact cosine similarity, best first.

    `embedder` (a spec, or None for the recorded one) is checked against the recorded identity: a query embedded
    with another model would be compared in another vector space, so it is refused, not answered."""

    name = "dense"

    def __init__(self, index_dir: str | Path, embedder: str | EmbedderSpec | None = None, block_rows: int = 65536):
        import numpy as np

        self.path = Path(index_dir)
        d = self.path / DENSE_DIR
        if not os.path.lexists(d / "meta.json"):
            raise ConfigError(
                f"{self.path}: holds no dense index ({DENSE_DIR}/meta.json); build one with "
                f"`rise-batch index --retriever dense` (or hybrid)"
            )
        self.meta = read_json_file(d / "meta.json", below=self.path)  # as every index file (safe_read)
        if not isinstance(self.meta, dict) or self.meta.get("format") not in (DENSE_FORMAT, "rise_batch.dense/1"):
            raise ValueError(f"{d}/meta.json: unsupported format {self.meta.get('format')!r} (expected {DENSE_FORMAT})")
        self.passages = parse_passages(self.meta.get("passages", {}).get("rule", "doc"))
        recorded = parse_embedder(self.meta["embedder"])
        asked = (
            recorded
            if embedder is None
            else (embedder if isinstance(embedder, EmbedderSpec) else parse_embedder(embedder))
        )
        if str(asked) != str(recorded):
            raise ConfigError(
                f"{self.path}: embedded with {recorded}; a query embedded with {asked} would be compared in another "
                "vector space (omit --embedder to use the recorded model, or rebuild the index with it)"
            )
        self.embedder = load_embedder(asked, self._endpoint(asked))
        if self.embedder.weights_sha256 != self.meta["weights_sha256"]:
            raise ConfigError(
                f"{self.path}: embedded with {recorded} weights {self.meta['weights_sha256'][:12]}, but the installed "
                f"model's weights are {self.embedder.weights_sha256[:12]} (another version): rebuild the dense index"
            )
        self.vectors = load_npy(d / "embeddings.npy", below=self.path, ndim=2)
        self.docids = docid_table(self.path)  # mapped, shared with the node's other processes
        n = len(self.docids)
        if self.passages.kind == "doc":
            self.offsets = np.arange(n + 1, dtype=np.int64)
        else:
            self.offsets = load_npy(d / OFFSETS_FILE, below=self.path)
            if self.offsets.shape != (n + 1,) or int(self.offsets[0]) != 0 or not (np.diff(self.offsets) > 0).all():
                raise ValueError(
                    f"{d}/{OFFSETS_FILE}: not {n} + 1 increasing offsets from 0 (every document has a passage); "
                    "rebuild the dense index"
                )
        if self.vectors.shape != (int(self.offsets[-1]), self.embedder.dim):
            raise ValueError(f"{d}/embeddings.npy: shape {self.vectors.shape} for {n} docids")
        self.block_rows = max(1, int(block_rows))

    def __len__(self) -> int:
        return len(self.docids)

    def _endpoint(self, spec: EmbedderSpec) -> Any:
        """A remote embedder's endpoint for the queries: the one the index was built at, as recorded (base URL and
        the key's variable; `rpm` and the like at their defaults)."""
        if not EMBEDDERS.lookup(spec.kind).remote:
            return None
        key_env = self.meta.get("api_key_env") or "OPENAI_API_KEY"
        return endpoint_config(self.meta.get("base_url"), spec.name, key_env)

    def _blocks(self) -> Iterator[tuple[int, int]]:
        """Document ranges [d0, d1) whose passages fill about block_rows rows (at least one document each)."""
        import numpy as np

        d0, n = 0, len(self.docids)
        while d0 < n:
            d1 = int(np.searchsorted(self.offsets, int(self.offsets[d0]) + self.block_rows, side="right")) - 1
            d1 = min(max(d1, d0 + 1), n)
            yield d0, d1
            d0 = d1

    def search(self, queries: list[str], k: int) -> list[Hits]:
        """Top-k documents per query by cosine similarity of their best passage; a query with no known token gets
        empty Hits."""
        import numpy as np

        k = clamp_k(queries, k, len(self.docids))
        if k <= 0 or not queries:
            return [Hits([], []) for _ in queries]
        q = self.embedder.embed(list(queries))
        live = np.linalg.norm(q, axis=1) > 0
        best_s = np.full((len(queries), 0), -np.inf, dtype=np.float32)
        best_r = np.zeros((len(queries), 0), dtype=np.int64)
        for start, stop in self._blocks():
            p0, p1 = int(self.offsets[start]), int(self.offsets[stop])
            s = q @ np.asarray(self.vectors[p0:p1], dtype=np.float32).T
            if p1 - p0 != stop - start:  # passages -> documents: each document's best passage
                s = np.maximum.reduceat(s, np.asarray(self.offsets[start:stop]) - p0, axis=1)
            if s.shape[1] > k:
                top = np.argpartition(-s, k - 1, axis=1)[:, :k]
                s = np.take_along_axis(s, top, axis=1)
            else:
                top = np.broadcast_to(np.arange(s.shape[1]), s.shape)
            best_s = np.concatenate([best_s, s], axis=1)
            best_r = np.concatenate([best_r, top + start], axis=1)
            if best_s.shape[1] > k:
                keep = np.argpartition(-best_s, k - 1, axis=1)[:, :k]
                best_s = np.take_along_axis(best_s, keep, axis=1)
                best_r = np.take_along_axis(best_r, keep, axis=1)
        out = []
        for i in range(len(queries)):
            if not live[i]:
                out.append(Hits([], []))
                continue
            order = np.lexsort((best_r[i], -best_s[i]))  # best first; ties by row, so the order is deterministic
            out.append(Hits(self.docids.take(best_r[i][order].tolist()), best_s[i][order].astype(float).tolist()))
        return out
