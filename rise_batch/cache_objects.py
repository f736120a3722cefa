"""Node-local copies of objects in object storage (an index, a structure OUT's small files): listed, copied by
several threads at once (object storage answers each request slowly, not each byte), and checked against what the
source records of itself (`published`), through the cache's entries (rise_batch/cache.py)."""

from __future__ import annotations

import json
from pathlib import Path

from rise_batch.cache import Cached, Source, key_of, materialize
from rise_batch.storage import SUMS


def fetch_objects(src, root: Path, kind: str, marker: str) -> Cached:
    """A verified local copy of the objects under `src` (an ObjectPath: an index to memory-map), keyed by the
    prefix, its objects' names and sizes and the bytes of `marker` (its done marker, e.g. meta.json, which must be
    among them: the source is whole only then). Each file is checked against its listed size."""
    listing = [(str(o.relative_to(src)), n) for o, n in src.list(recursive=True)]
    if marker not in {name for name, _ in listing}:
        raise FileNotFoundError(f"{src}: no {marker} (not written, or not finished)")
    source = published(src, listing, marker)
    key = key_of(str(src), listing, source.exact[marker])
    return materialize(root, kind, key, lambda tmp: copy_objects(src, listing, tmp), source, str(src))


def published(src, listing: list[tuple[str, int]], marker: str) -> Source:
    """What the objects under `src` record about themselves: their listed sizes, the bytes of `marker` and of the
    digest list a publisher writes beside them (storage.SUMS, sha256 of each object; absent from trees published
    before it, which are then checked by size and marker only)."""
    names = {name for name, _ in listing}
    exact = {marker: (src / marker).read_bytes()}
    digests: dict[str, tuple[str, str]] = {}
    if SUMS in names:
        exact[SUMS] = (src / SUMS).read_bytes()
        sums = json.loads(exact[SUMS])
        digests = {name: ("sha256", sums[name]) for name in names - {SUMS} if name in sums}
        if len(digests) != len(names) - 1:
            raise OSError(f"{src / SUMS}: does not list every object beside it (a publish cut short?)")
    return Source(dict(listing), exact, digests)


def copy_objects(src, listing: list[tuple[str, int]], dest: Path, threads: int = 8) -> int:
    """The objects (name relative to `src`, listed size) copied under `dest` by `threads` at once (object storage
    answers each request slowly, not each byte), each checked against its listed size (a copy cut short raises);
    returns the bytes copied."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow.fs as pafs

    local = pafs.LocalFileSystem()
    for parent in {(dest / name).parent for name, _ in listing}:
        parent.mkdir(parents=True, exist_ok=True)

    def one(item: tuple[str, int]) -> None:
        name, size = item
        target = dest / name
        pafs.copy_files((src / name).path, str(target), src.fs, local)
        if target.stat().st_size != size:
            raise OSError(f"{src / name}: copied {target.stat().st_size} bytes of {size}")

    with ThreadPoolExecutor(max(1, min(threads, len(listing)))) as pool:
        list(pool.map(one, listing))
    return sum(n for _, n in listing)


def read_objects(src, names: list[str], threads: int = 8) -> dict[str, bytes]:
    """The bytes of the small objects `names` under `src`, read by `threads` at once."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max(1, min(threads, len(names)))) as pool:
        return dict(zip(names, pool.map(lambda n: (src / n).read_bytes(), names), strict=True))
