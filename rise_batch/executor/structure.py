"""Ray execution of the structure job: actors call `structure_shard`, the driver keeps shards in flight.

Actors receive a config dict and a ShardSpec (a file name and a row range), never documents, so nothing large
crosses the object store. A dead actor is replaced and its shards resubmitted; this is safe because a shard
resumes from its own checkpoint parts. A shard that keeps killing actors is an application bug and fails loudly.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import ray

from rise_batch.config import StructureConfig, config_from_dict, config_to_dict
from rise_batch.corpus.readers import ShardSpec
from rise_batch.structuring.budget import BudgetExceeded

MAX_SHARD_ATTEMPTS = 3


@ray.remote
class StructureWorker:
    """Builds its backend (and LLM client) once, then structures whole shards on request."""

    def __init__(self, cfg: dict[str, Any], prompt_text: str, limiter_name: str | None) -> None:
        from rise_batch.structuring.job import make_backend

        self.cfg: StructureConfig = config_from_dict(cfg)
        limiter = None
        if limiter_name:
            from rise_batch.llm.limiter_actor import RemoteLimiter

            limiter = RemoteLimiter(limiter_name, self.cfg.llm.concurrency)
        self.backend = make_backend(self.cfg, prompt_text, limiter)

    async def run_shard(self, spec: ShardSpec, run_hash: str) -> dict:
        from rise_batch.structuring.shard import structure_shard

        return await structure_shard(self.cfg, spec, self.backend, run_hash)

    def transport_stats(self) -> dict:
        from rise_batch.structuring.job import transport_stats

        return transport_stats(self.backend)

    async def close(self) -> dict:
        """The transport stats, then the client closed in this actor's own event loop (its aiohttp session's)."""
        stats = self.transport_stats()
        client = getattr(self.backend, "client", None)
        if client is not None:
            await client.aclose()
        return stats


def init_ray(address: str | None) -> None:
    """Connect to `address`, to the cluster of a `ray job submit` (RAY_ADDRESS), or start a local Ray."""
    if not ray.is_initialized():
        ray.init(address=address or None, log_to_driver=True, include_dashboard=False)


def run_on_ray(cfg: StructureConfig, plan, bar) -> tuple[list[dict], list[dict]]:
    """Run every shard of `plan` on `cfg.n_workers` actors: (per-shard stats, per-actor transport stats)."""
    init_ray(cfg.ray_address)
    limiter_name, limiter = None, None
    if cfg.backend == "llm":
        from rise_batch.llm.limiter_actor import start_limiter

        limiter_name, limiter = start_limiter(cfg.llm, plan.run_hash)
    cfg_dict = config_to_dict(cfg)
    n_workers = max(cfg.n_workers, 1)
    per_actor = max(1, (cfg.max_shards_in_flight or 2 * n_workers) // n_workers)

    def spawn() -> Any:
        return StructureWorker.options(max_concurrency=per_actor + 1).remote(cfg_dict, plan.prompt_text, limiter_name)

    actors = [spawn() for _ in range(n_workers)]
    queue: deque[ShardSpec] = deque(plan.shards)
    attempts: dict[int, int] = {}
    inflight: dict[Any, tuple[int, ShardSpec]] = {}  # ref -> (actor slot, shard)
    load = [0] * n_workers
    results: list[dict] = []
    stopped: BudgetExceeded | None = None
    while queue or inflight:
        for slot in range(n_workers):
            while queue and load[slot] < per_actor:
                spec = queue.popleft()
                attempts[spec.shard_id] = attempts.get(spec.shard_id, 0) + 1
                inflight[actors[slot].run_shard.remote(spec, plan.run_hash)] = (slot, spec)
                load[slot] += 1
        done, _ = ray.wait(list(inflight), num_returns=1)
        for ref in done:
            slot, spec = inflight.pop(ref)
            load[slot] -= 1
            try:
                stats = ray.get(ref)
            except BudgetExceeded as e:  # --max-cost (Ray re-raises it as a subclass): no new shards, let the
                stopped = stopped or getattr(e, "cause", e)  # running ones stop with rows flushed, then stop
                queue.clear()
                continue
            except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError) as e:
                if attempts[spec.shard_id] >= MAX_SHARD_ATTEMPTS:
                    raise RuntimeError(
                        f"shard {spec.shard_id} ({spec.source} rows {spec.start}-{spec.stop}) "
                        f"killed its worker {MAX_SHARD_ATTEMPTS} times; last error: {e}"
                    ) from e
                _replace_actor(actors, slot, spawn, inflight, queue, load)
                queue.appendleft(spec)
                continue
            results.append(stats)
            bar.update(stats.get("docs_total", 0))
    transport = ray.get([a.close.remote() for a in actors])
    for a in actors:
        ray.kill(a)
    del limiter  # held until every shard is done
    if stopped is not None:
        raise stopped
    return results, transport


def _replace_actor(actors, slot, spawn, inflight, queue, load) -> None:
    """The actor in `slot` is dead: requeue everything it held and start a fresh one."""
    for ref, (s, spec) in list(inflight.items()):
        if s == slot:
            inflight.pop(ref)
            queue.appendleft(spec)
    load[slot] = 0
    ray.kill(actors[slot], no_restart=True)
    actors[slot] = spawn()
