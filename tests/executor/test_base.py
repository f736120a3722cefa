"""The executor's contract without any scheduling: how a lost item is recorded or raised, how a worker is built."""

from __future__ import annotations

import pytest

from rise_batch.corpus.readers import ShardSpec
from rise_batch.executor.base import ItemLost, Lost, Stage, WorkerSpec, build_worker
from rise_batch.structuring.worker import describe_shard


def test_a_shard_that_keeps_killing_its_worker_fails_with_todays_message() -> None:
    spec = ShardSpec(shard_id=3, source="c.parquet", start=10, stop=20)
    stage = Stage(worker=WorkerSpec("x:y", {}), describe=describe_shard)
    cause = RuntimeError("The actor died unexpectedly")
    with pytest.raises(ItemLost) as e:
        stage.lose(spec, Lost("died", "died running shard 3", 3, 1.0, cause))
    assert str(e.value) == (
        "shard 3 (c.parquet rows 10-20) killed its worker 3 times; last error: The actor died unexpectedly"
    )
    assert e.value.__cause__ is cause and isinstance(e.value, RuntimeError)


def test_a_stage_error_is_re_raised_as_itself_and_on_lost_replaces_raising() -> None:
    error = ValueError("bad row")
    with pytest.raises(ValueError, match="bad row"):
        Stage(worker=WorkerSpec("x:y", {})).lose("item", Lost("error", "bad row", 0, 0.0, error))
    seen: list = []
    Stage(worker=WorkerSpec("x:y", {}), on_lost=lambda item, lost: seen.append((item, lost.kind))).lose(
        "item", Lost("stuck", "killed", 0, 9.0)
    )
    assert seen == [("item", "stuck")]


class Echo:
    def __init__(self, config, services) -> None:
        self.config, self.services = config, services


def test_workers_are_built_from_an_importable_path() -> None:
    worker = build_worker(WorkerSpec(f"{__name__}:Echo", {"a": 1}), {"limiter": "n"})
    assert isinstance(worker, Echo) and worker.config == {"a": 1} and worker.services == {"limiter": "n"}
    with pytest.raises(ValueError, match="package.module:name"):
        build_worker(WorkerSpec(__name__, {}), {})
