"""Run `tokenize_shard` over a corpus plan with local processes, yielding results in corpus order.

Workers write their postings to a spill directory and send back only the small summary, so neither the pipe nor
the parent ever holds more than a few shards' postings; the merge reads them back one shard at a time. The Ray
runner (rise_batch/executor/index_tasks.py) has the same `map` shape and keeps postings in the object store instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from rise_batch.index.tokenize import ShardPostings, ShardSummary, TokenizerSettings, tokenize_shard

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
    spec: ShardSpec, settings: TokenizerSettings, on_bad_row: str, base: str
) -> tuple[ShardSummary, list[str]]:
    """Worker entry point: tokenize one shard, spill its postings, return the summary and the spill paths."""
    summary, postings = tokenize_shard(spec, settings, on_bad_row)
    return summary, save_postings(postings, Path(base))


class ProcessShardRunner:
    """`workers` processes, at most `2 * workers` shards in flight; workers <= 1 runs inline.

    Workers are spawned (not forked: the parent may hold threads, e.g. pyarrow's) and not from a forkserver,
    whose own resident memory would add to the build's; they import only the tokenizer, pyarrow and PyStemmer.
    """

    name = "process"

    def __init__(self, workers: int = 2, start_method: str = "spawn") -> None:
        self.workers = max(1, int(workers))
        self.start_method = start_method

    def map(
        self, shards: Sequence[ShardSpec], settings: TokenizerSettings, on_bad_row: str, spill_dir: Path
    ) -> Iterator[tuple[ShardSummary, Fetch]]:
        spill_dir.mkdir(parents=True, exist_ok=True)
        bases = [str(spill_dir / f"shard-{i:06d}") for i in range(len(shards))]
        if self.workers == 1:
            for spec, base in zip(shards, bases, strict=True):
                summary, paths = tokenize_shard_to_disk(spec, settings, on_bad_row, base)
                yield summary, partial(load_postings, paths)
            return
        import multiprocessing as mp

        ctx = mp.get_context(self.start_method)
        window = 2 * self.workers
        with ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx) as pool:
            pending: dict[int, Future] = {}
            nxt = 0
            try:
                for i in range(len(shards)):
                    while nxt < len(shards) and nxt < i + window:
                        pending[nxt] = pool.submit(
                            tokenize_shard_to_disk, shards[nxt], settings, on_bad_row, bases[nxt]
                        )
                        nxt += 1
                    summary, paths = pending.pop(i).result()
                    yield summary, partial(load_postings, paths)
            finally:
                for f in pending.values():
                    f.cancel()
