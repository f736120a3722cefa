"""A run's inputs in object storage (`--docs s3://…`, `--index s3://…`), made local on each node that reads them.

The agent's workspace hardlinks documents, `rg` reads files and the index is memory-mapped: all three need a POSIX
tree on the node's own disk, on the file system its workspaces are on. A `--docs` in object storage is a `structure`
OUT there, which holds the checkpoint and one archive of rendered files per shard but no file per document, so its
tree is unpacked from those archives (or, for an OUT without them, rendered from the checkpoint and the corpus), by
every core of the node (a spawned process per core, a shard at a time); an index is copied. Each
worker asks for them when it starts (`localize`), and the node-local cache (rise_batch/cache.py, under the run's
`cache_dir`) makes each one once per node: the other workers of the node wait for that copy, later runs reuse it.
The driver only checks that the sources are whole (`check_sources`): it never needs the trees itself.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rise_batch.cache import Cached, Source, cache_dir, key_of, materialize
from rise_batch.cache_objects import copy_objects, fetch_objects, read_objects
from rise_batch.corpus.readers import ShardSpec
from rise_batch.corpus.scan import shards_from_json
from rise_batch.errors import ConfigError
from rise_batch.executor.local import node_cpus, process_map
from rise_batch.index.build import META_FILE
from rise_batch.index.search import index_marker
from rise_batch.io import read_json
from rise_batch.storage import ObjectPath, location
from rise_batch.structuring.archive import checked_archive
from rise_batch.structuring.checkpoint import CheckpointStore
from rise_batch.structuring.job import MANIFEST
from rise_batch.structuring.shard import docmap_by_shard, materialize_shard, shard_relpaths, write_docs
from rise_batch.structuring.verify import require_intact

log = logging.getLogger(__name__)


def _docs_source(uri: str) -> tuple[ObjectPath, dict[str, Any], list]:
    """(OUT, its manifest, its shards) of a `structure` OUT in object storage; refuses one that is not such an OUT or
    whose checkpoint is damaged, naming it."""
    out = location(uri)
    if not (out / MANIFEST).is_file():
        raise ConfigError(f"docs {out}: no {MANIFEST} (--docs in object storage must be a `structure` OUT)")
    manifest = read_json(out / MANIFEST)
    shards = shards_from_json(manifest["shards"])
    require_intact(out, shards)
    return out, manifest, shards


def check_sources(cfg: Any, uses_index: bool) -> None:
    """The driver's check of a run's inputs in object storage, before any worker starts: a docs OUT that is whole,
    an index with its meta.json (the workers then copy them, each node once)."""
    for key in ("docs", "original_docs"):
        value = getattr(cfg, key)
        if value and isinstance(location(value), ObjectPath):
            _docs_source(value)
    index = location(cfg.index) if uses_index and cfg.index else None
    if isinstance(index, ObjectPath) and not (index / index_marker(index)).is_file():
        raise FileNotFoundError(f"{index}: no {META_FILE} (not written, or not finished)")


def local_docs(uri: str, root: Path) -> Cached:
    """A docs directory built from a `structure` OUT in object storage, under `root/docs/`: its checkpoint, stats,
    docmap.parquet and manifest.json copied (a structure OUT again, so the original-text twin is derived from it
    and checked against the checkpoint's content hashes as for any OUT), and corpus/<relpath> unpacked from the
    shards' archives, each checked against its done marker (`make_tree`), or rendered from that local checkpoint
    and the corpus. Refuses an unfinished or damaged run, naming it. Its bytes are what it reads:
    the objects copied and the corpus files. The copy is checked against the OUT on every use: its manifest and
    done markers byte for byte, each checkpoint part against the BLAKE2b digest the OUT's done marker records."""
    out, manifest, shards = _docs_source(uri)
    listing = [(str(p.relative_to(out)), n) for sub in ("checkpoint", "stats") for p, n in (out / sub).list()]
    key = key_of(str(out), manifest["run_hash"], listing)
    listing += [(name, (out / name).stat().st_size) for name in ("docmap.parquet", MANIFEST)]
    source = _recorded(out, listing)

    def fill(tmp: Path) -> int:
        read = copy_objects(out, listing, tmp)
        n, bulk = make_tree(tmp, uri, shards, manifest["config"]["max_doc_chars"])
        if n != manifest["n_docs"]:
            raise ConfigError(
                f"docs {out}: {n} of {manifest['n_docs']} documents are structured (an unfinished run): finish it "
                "with `rise-batch structure` first"
            )
        return read + bulk

    return materialize(root, "docs", key, fill, source, str(out))


def _recorded(out: ObjectPath, listing: list[tuple[str, int]]) -> Source:
    """What a structure OUT records of the files a node copies: their sizes, its manifest and done markers (their
    bytes) and, in each done marker, the digest of each checkpoint part."""
    exact = read_objects(out, [name for name, _ in listing if name == MANIFEST or name.startswith("stats/")])
    digests: dict[str, tuple[str, str]] = {}
    for name, data in exact.items():
        if name.startswith("stats/") and name.endswith(".json"):
            for part in json.loads(data).get("parts") or []:
                digests[f"checkpoint/{part['file']}"] = ("blake2b", part["blake2b"])
    return Source(dict(listing), exact, digests)


def make_tree(tmp: Path, uri: str, shards: list, max_chars: int, workers: int | None = None) -> tuple[int, int]:
    """corpus/<relpath> of every shard under the staging entry `tmp` (its checkpoint, stats and docmap already
    copied there from the OUT `uri`), one shard at a time in each of one spawned process per core of the node
    (`workers`, default all of them): unpacked from the shard's archive, or rendered when it has none or its
    archive does not check (said, one line per shard). Returns (documents written, bytes read from the source).
    Each file is created in place (the entry appears whole once its marker is written and it is renamed, so no
    per-file temporary is needed)."""
    slices = docmap_by_shard(tmp)
    calls = [(tmp, uri, s, max_chars, slices.get(s.shard_id)) for s in shards]
    n, read, rendered = 0, 0, set()
    for spec, (docs, archive_bytes, why) in zip(
        shards, process_map(node_shard, calls, min(workers or node_cpus(), len(calls))), strict=True
    ):
        n += docs
        if archive_bytes is None:
            rendered.add(spec.source)
        else:
            read += archive_bytes
        if why:
            log.warning("docs %s: shard %d rendered from the checkpoint and the corpus: %s", uri, spec.shard_id, why)
    return n, read + sum(location(src).stat().st_size for src in rendered)


def node_shard(tmp: Path, uri: str, spec: ShardSpec, max_chars: int, part=None) -> tuple[int, int | None, str]:
    """corpus/<relpath> of one shard under `tmp` (see `make_tree`): unpacked from its archive when its done marker
    names one and it checks (structuring/archive.py), else rendered from the checkpoint and the corpus. Returns
    (documents written, the archive's bytes or None when rendered, why an archive was not used or ""). `part`: the
    shard's docmap rows (`docmap_by_shard`), else read here."""
    rel = shard_relpaths(tmp, spec.shard_id, part)
    marker = CheckpointStore(tmp).shard_stats(spec.shard_id)
    record = marker.get("archive")
    why = ""
    if isinstance(record, dict):
        rows = sum(int(p.get("rows", 0)) for p in marker.get("parts") or [])
        try:
            docs = checked_archive(location(uri), spec.shard_id, record, rows, rel)
        except ValueError as e:
            why = str(e)
        else:
            return write_docs(tmp / "corpus", docs, fresh=True), int(record["bytes"]), ""
    return materialize_shard(tmp, spec, max_chars, None, None, tmp / "corpus", True, rel), None, why


def localize(cfg: Any, uses_index: bool) -> tuple[Any, dict[str, dict]]:
    """`cfg` (a RunConfig) with its object-storage docs and index replaced by this node's cached copies, and what
    getting each cost here ({"docs": {bytes, seconds, reused}, ...}); inputs on a POSIX path are used in place.
    The index is copied in a thread while the docs tree is made: the copy waits on object storage and the tree on
    the node's cores, so a fresh node pays about the longer of the two, not their sum."""
    root = cache_dir(cfg.cache_dir)
    changes: dict[str, str] = {}
    report: dict[str, dict] = {}
    index = location(cfg.index) if uses_index and cfg.index else None
    with ThreadPoolExecutor(1, thread_name_prefix="index-copy") as pool:
        index_copy = None
        if isinstance(index, ObjectPath):
            index_copy = pool.submit(fetch_objects, index, root, "index", index_marker(index))
        for key in ("docs", "original_docs"):
            value = getattr(cfg, key)
            if value and isinstance(location(value), ObjectPath):
                got = local_docs(value, root)
                changes[key], report[key] = str(got.path), got.report()
        if index_copy is not None:
            got = index_copy.result()
            changes["index"], report["index"] = str(got.path), got.report()
    return (dataclasses.replace(cfg, **changes) if changes else cfg), report
