"""A run's inputs in object storage (`--index s3://…`, `--docs s3://…`), made local on this machine before it starts.

The agent's workspace hardlinks documents, `rg` reads files and the index is memory-mapped: all three need a POSIX
tree on the disk the workspaces are on. A `--docs` in object storage is a `structure` OUT there, which holds the
checkpoint but no file per document, so its tree is materialized from the checkpoint and the corpus; an index is
copied (index.retriever.local_index). Both go to a cache directory (storage.cache_root: `$RISE_BATCH_CACHE`,
default `<tmp>/rise-batch-cache`), keyed by what they
were made from, built in a temporary sibling and renamed into place only when complete and verified, and reused
by later runs. This is the simple, per-machine form: every Ray worker of the run must see the same cache path (one
machine, or a cache on shared storage); per-node caches are a separate step.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

from rise_batch.storage import ObjectPath, build_once, cache_root, location


def local_docs(uri: str) -> str:
    """A docs directory (corpus/<relpath>, docmap.parquet, manifest.json) built from a `structure` OUT in object
    storage; refuses an unfinished or damaged run, naming it."""
    from rise_batch.corpus.scan import shards_from_json
    from rise_batch.errors import ConfigError
    from rise_batch.io import read_json
    from rise_batch.structuring.job import MANIFEST
    from rise_batch.structuring.shard import materialize_shard
    from rise_batch.structuring.verify import require_intact

    out = location(uri)
    if not (out / MANIFEST).is_file():
        raise ConfigError(f"docs {out}: no {MANIFEST} (--docs in object storage must be a `structure` OUT)")
    manifest = read_json(out / MANIFEST)
    shards = shards_from_json(manifest["shards"])
    listing = [(str(p.relative_to(out)), n) for sub in ("checkpoint", "stats") for p, n in (out / sub).list()]
    key = hashlib.sha256(repr((str(out), manifest["run_hash"], listing)).encode()).hexdigest()[:20]
    require_intact(out, shards)

    def fill(tmp: Path) -> None:
        n = sum(materialize_shard(out, s, manifest["config"]["max_doc_chars"], dest=tmp / "corpus") for s in shards)
        if n != manifest["n_docs"]:
            raise ConfigError(
                f"docs {out}: {n} of {manifest['n_docs']} documents are structured (an unfinished run): finish it "
                "with `rise-batch structure` first"
            )
        for name in ("docmap.parquet", MANIFEST):
            (tmp / name).write_bytes((out / name).read_bytes())

    return str(build_once(cache_root() / "docs", key, fill))


def localize(cfg):
    """`cfg` (a RunConfig) with its object-storage index and docs replaced by local copies."""
    changes = {}
    if cfg.index and isinstance(location(cfg.index), ObjectPath):
        from rise_batch.index.search import local_index

        changes["index"] = str(local_index(cfg.index))
    for key in ("docs", "original_docs"):
        value = getattr(cfg, key)
        if value and isinstance(location(value), ObjectPath):
            changes[key] = local_docs(value)
    return dataclasses.replace(cfg, **changes) if changes else cfg
