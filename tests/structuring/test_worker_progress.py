"""The typed progress reports of structure's workers: what a worker answers the driver's poll (WorkerProgress) and
its shard results (ShardReport) move the driver's line as the dict reports did, and a poll's counts are a copy (a
later document in the worker does not change a report already taken)."""

from __future__ import annotations

import asyncio

from rise_batch.corpus.readers import ShardSpec
from rise_batch.progress import Progress
from rise_batch.structuring.stats import ShardCount, ShardReport, ShardStats, WorkerProgress
from rise_batch.structuring.worker import ShardProgress, ShardWorker


def spec(shard_id: int) -> ShardSpec:
    return ShardSpec(shard_id=shard_id, source="c.jsonl", start=0, stop=20)


def test_reports_and_results_move_the_line_once_per_document() -> None:
    bar = Progress("structure[llm]", 40, enabled=False, show_cost=True, show_transport=True)
    shown = ShardProgress(bar, local=False)
    shown.on_progress(WorkerProgress({0: ShardCount(5, 2, 0.05)}, retries=1, rate_limited=2))
    shown.on_progress(WorkerProgress({0: ShardCount(5, 2, 0.05)}))  # the same counts again: nothing new
    assert (bar.done, bar.already, round(bar.cost, 4), bar.retries, bar.rate_limited) == (5, 2, 0.05, 1, 2)
    final = ShardStats(counted=True, docs_total=20, docs_resumed=2, cost_usd=0.18, rebought_cost_usd=0.01)
    shown.on_result(spec(0), ShardReport(final, retries=0, rate_limited=1))
    resumed = ShardStats(counted=True, docs_total=20, cost_usd=0.2, shards_resumed=1)  # an earlier run's shard
    shown.on_result(spec(1), ShardReport(resumed))
    assert (bar.done, bar.already, round(bar.cost, 4), bar.rate_limited) == (18, 22, 0.39, 3)


def test_a_poll_answers_a_copy_of_each_running_shards_counts() -> None:
    worker = ShardWorker.__new__(ShardWorker)  # its backend is not needed to answer a poll
    worker.backend, worker.reported = None, {}
    count = worker.running = {3: ShardCount()}
    count[3](1, 0.01)
    count[3](1, 0.0, True)
    report = asyncio.run(worker.progress())
    count[3](1, 0.01)
    assert report == WorkerProgress({3: ShardCount(1, 1, 0.01)}, 0, 0)
