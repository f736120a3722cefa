"""Executors: map a stage's per-item function over items, in process or on Ray. Only executor/ray.py imports ray.

`executor_for` is how a job driver chooses one from its config; stages never import this package (the executor
builds their workers from an importable factory path, see executor/base.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rise_batch.executor.local import LocalExecutor

if TYPE_CHECKING:
    from rise_batch.executor.base import Executor, MapOptions


def executor_for(workers: int, options: MapOptions, address: str | None = None, env: Sequence[str] = ()) -> Executor:
    """`workers == 0`: this process (debugging, small runs); otherwise `workers` Ray actors (local Ray or `address`),
    lent the variables named in `env` (and executor.ray.FORWARDED_ENV) when `address` is a cluster."""
    if workers == 0:
        return LocalExecutor(options)
    from rise_batch.executor.ray import RayExecutor  # lazy: loads ray (Ray runs only)

    return RayExecutor(workers, options, address, env)
