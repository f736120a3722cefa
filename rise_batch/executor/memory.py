"""Memory on a Ray node: what an actor reserves, and the one line a stage ends with when Ray's memory monitor keeps
killing its workers.

Ray's memory monitor kills a worker process when its node's memory passes a threshold (95% by default), whoever
holds the memory; a call to a killed actor raises `ray.exceptions.OutOfMemoryError`, whose message carries the
node's figures. The executor treats such a death like any other (the items go back to the queue) until an item has
been killed under it `max_attempts` times; then the stage stops with MemoryPressure (exit 75), not Ray's traceback.
"""

from __future__ import annotations

import re

import ray

from rise_batch.errors import ConfigError, MemoryPressure

OOM = ray.exceptions.OutOfMemoryError
_FIGURES = re.compile(r"Memory on the node \(IP: ([^,]+),[^)]*\) was ([\d.]+GB used / [\d.]+GB limit)")
_THRESHOLD = re.compile(r"\(([\d.]+)% of \d+B limit\)")


def check_memory(what: str, wanted: int) -> None:
    """Refuse a per-actor reservation no node can give (Ray would wait for it forever), naming the figures."""
    offered = [n.get("Resources", {}).get("memory", 0) for n in ray.nodes() if n.get("Alive")]
    most = max(offered, default=0)
    if wanted > most:
        raise ConfigError(
            f"{what} workers ask {wanted / 2**30:.2f} GB of memory each, but no node of the Ray cluster offers more "
            f"than {most / 2**30:.2f} GB to Ray: lower --worker-memory (0 reserves none)"
        )


def memory_pressure(what: str, kills: int, tries: int, error: BaseException) -> MemoryPressure:
    """The one line a stage ends with when Ray's memory monitor keeps killing its workers: the node's figures from
    Ray's message, and what to do."""
    text = str(error)
    figures = _FIGURES.search(text)
    threshold = _THRESHOLD.search(text)
    said = [f"node {figures.group(1)}: {figures.group(2)}"] if figures else []
    said += [f"over its {threshold.group(1)}% threshold"] if threshold else []
    where = f" ({', '.join(said)})" if said else ""
    return MemoryPressure(
        f"Ray's memory monitor killed {what} workers {kills} times{where}, an item under each of its {tries} tries: "
        "the node is out of memory, maybe for another process; free memory there, or run fewer workers per node "
        "(fewer --workers, or a larger --worker-memory so Ray places fewer on a node), then re-run the same command: "
        "finished work is kept"
    )
