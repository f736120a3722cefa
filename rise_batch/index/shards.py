"""The index build's per-shard function and where it runs: local processes, or Ray tasks; results in corpus order.

A shard runner yields (summary, fetch-postings) in the order of the shards, so the merge sees the corpus in order
whatever the workers' speeds. Local workers write their postings to a spill directory and send back only the small
summary, so neither the pipe nor the parent ever holds more than a few shards' postings; the merge reads them back
one shard at a time. On Ray, postings stay in the object store until fetched, or are spilled alike
(`RayShardRunner(spill=True)`). The scheduling itself is the executor's (`process_map`, `task_map`); this module
only says what one shard is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from rise_batch.executor.local import process_map
from rise_batch.index.tokenize import ShardPostings, ShardSummary, TokenizerSettings, tokenize_shard
from rise_batch.storage import known_options, remember_options

if TYPE_CHECKING:
    from rise_batch.corpus.readers import ShardSpec

Fetch = Callable[[], ShardPostings]


class ShardRunner(Protocol):
    """Runs the per-shard function; yields (summary, fetch-postings) in the order of `shards`."""

    name: str

    def map(
        self, shards: Sequence[ShardSpec], settings: TokenizerSettings, on_bad_row: str, spill_dir: Path
    ) -> Iterator[tuple[ShardSummary, Fetch]]: ...


def save_postings(p: ShardPostings, base: Path) -> list[str]:
    import numpy as np

    paths = []
    for name, arr in zip(p._fields, p, strict=True):
        path = f"{base}.{name}.npy"
        np.save(path, arr)
        paths.append(path)
    return paths


def load_postings(paths: list[str]) -> ShardPostings:
    import numpy as np

    return ShardPostings(*(np.load(p) for p in paths))


def tokenize_shard_to_disk(
    spec: ShardSpec, settings: TokenizerSettings, on_bad_row: str, base: str, storage: dict | None = None
) -> tuple[ShardSummary, list[str]]:
    """Worker entry point: tokenize one shard, spill its postings, return the summary and the spill paths.
    `storage` is the driver's storage.known_options(): the shard's source URI resolves with them."""
    summary, postings = tokenize_shard_with(spec, settings, on_bad_row, storage)
    return summary, save_postings(postings, Path(base))


class ProcessShardRunner:
    """`workers` spawned processes, at most `2 * workers` shards in flight; workers <= 1 runs inline.

    The workers import only the tokenizer, pyarrow and PyStemmer (see executor.local.process_map for why spawn).
    """

    name = "process"

    def __init__(self, workers: int = 2, start_method: str = "spawn") -> None:
        self.workers = max(1, int(workers))
        self.start_method = start_method

    def map(
        self, shards: Sequence[ShardSpec], settings: TokenizerSettings, on_bad_row: str, spill_dir: Path
    ) -> Iterator[tuple[ShardSummary, Fetch]]:
        spill_dir.mkdir(parents=True, exist_ok=True)
        opts = known_options()
        calls = [(spec, settings, on_bad_row, str(spill_dir / f"shard-{i:06d}"), opts) for i, spec in enumerate(shards)]
        for summary, paths in process_map(tokenize_shard_to_disk, calls, self.workers, self.start_method):
            yield summary, partial(load_postings, paths)


def _tokenize_item_to_disk(
    item: tuple[ShardSpec, str], settings: TokenizerSettings, on_bad_row: str, storage: dict | None = None
) -> tuple[ShardSummary, list[str]]:
    """Ray task entry point with spilling: `item` is (shard, spill base path)."""
    return tokenize_shard_to_disk(item[0], settings, on_bad_row, item[1], storage)


def tokenize_shard_with(
    spec: ShardSpec, settings: TokenizerSettings, on_bad_row: str, storage: dict | None = None
) -> tuple[ShardSummary, ShardPostings]:
    """`tokenize_shard` in a worker process, first given the driver's storage options (storage.known_options)."""
    remember_options(storage)
    return tokenize_shard(spec, settings, on_bad_row)


def _load_fetched(fetch: Callable[[], list[str]]) -> ShardPostings:
    return load_postings(fetch())


class RayShardRunner:
    """One Ray task per shard on a cluster (`address`, or the already-initialised / a fresh local one).

    At most `max_in_flight` shards are out (default: twice the cluster's CPUs). By default a shard's postings stay
    in the object store until the merge fetches them, so the store holds every shard's postings at once (12 bytes
    a posting: 4 GB at 1M documents, in shared memory beside the merge's own arrays). `spill=True` writes them to
    the spill directory as the local processes do and passes only the paths: the same memory as the local build,
    for callers whose spill directory every node can reach (the structure job's output directory must be).
    """

    name = "ray"

    def __init__(self, address: str | None = None, max_in_flight: int | None = None, spill: bool = False) -> None:
        from rise_batch.executor.ray import init_ray  # lazy: loads ray (Ray runs only)

        init_ray(address, log_to_driver=False)
        self.max_in_flight = max_in_flight
        self.spill = spill

    def map(
        self, shards: Sequence[ShardSpec], settings: TokenizerSettings, on_bad_row: str, spill_dir: Path
    ) -> Iterator[tuple[ShardSummary, Fetch]]:
        from rise_batch.executor.ray import task_map  # lazy: loads ray (Ray runs only)

        if not self.spill:  # postings live in the object store
            yield from task_map(
                tokenize_shard_with, shards, settings, on_bad_row, known_options(), max_in_flight=self.max_in_flight
            )
            return
        spill_dir = spill_dir.resolve()  # the tasks' working directory need not be ours
        spill_dir.mkdir(parents=True, exist_ok=True)
        items = [(spec, str(spill_dir / f"shard-{i:06d}")) for i, spec in enumerate(shards)]
        for summary, fetch in task_map(
            _tokenize_item_to_disk, items, settings, on_bad_row, known_options(), max_in_flight=self.max_in_flight
        ):
            yield summary, partial(_load_fetched, fetch)
