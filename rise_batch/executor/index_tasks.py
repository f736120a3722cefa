"""Ray tasks for the index build: the same `tokenize_shard` as the local processes, one task per shard.

Each task returns two objects: the small summary, which the driver merges in corpus order as soon as it can, and
the postings, which stay in the object store (spilled to disk by Ray if need be) until the driver's second pass
fetches them one shard at a time. So the driver's memory is the index plus one shard, as in the local build.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import ray

from rise_batch.corpus.readers import ShardSpec
from rise_batch.index.tokenize import ShardPostings, ShardSummary, TokenizerSettings, tokenize_shard


@ray.remote(num_returns=2, max_retries=2)
def tokenize_shard_task(
    spec: ShardSpec, settings: TokenizerSettings, on_bad_row: str
) -> tuple[ShardSummary, ShardPostings]:
    return tokenize_shard(spec, settings, on_bad_row)


class RayShardRunner:
    """Shard runner on a Ray cluster (`address`, or the already-initialised / a fresh local one)."""

    name = "ray"

    def __init__(self, address: str | None = None, max_in_flight: int | None = None) -> None:
        if not ray.is_initialized():
            ray.init(address=address, log_to_driver=False)
        self.max_in_flight = max_in_flight or max(2, 2 * int(ray.cluster_resources().get("CPU", 1)))

    def map(
        self, shards: Sequence[ShardSpec], settings: TokenizerSettings, on_bad_row: str, spill_dir: Path
    ) -> Iterator[tuple[ShardSummary, object]]:
        del spill_dir  # postings live in the object store
        settings_ref = ray.put(settings)
        refs: dict[int, tuple[ray.ObjectRef, ray.ObjectRef]] = {}
        nxt = 0
        for i in range(len(shards)):
            while nxt < len(shards) and nxt < i + self.max_in_flight:
                refs[nxt] = tokenize_shard_task.remote(shards[nxt], settings_ref, on_bad_row)
                nxt += 1
            summary_ref, postings_ref = refs.pop(i)
            yield ray.get(summary_ref), _Fetch(postings_ref)


class _Fetch:
    """Postings of one shard, fetched on demand; the reference is dropped once fetched so Ray can free it."""

    def __init__(self, ref: ray.ObjectRef) -> None:
        self.ref: ray.ObjectRef | None = ref

    def __call__(self) -> ShardPostings:
        if self.ref is None:
            raise RuntimeError("postings already fetched")
        postings = ray.get(self.ref)
        self.ref = None
        return postings
