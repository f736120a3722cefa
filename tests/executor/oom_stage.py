"""A stage whose items make Ray's memory monitor kill their worker, run on a private local Ray whose monitor fires
just above the machine's memory use at start: `python -m tests.executor.oom_stage ITEM...` maps the items over one
actor and prints the results as JSON, exiting as a command does (errors.run_main).

Items are "hog:NAME" (its first try allocates HOG_BYTES, then waits to be killed; later tries pass), "always:NAME"
(every try allocates), "ok:NAME". Run in a subprocess: the monitor's settings are read from the environment of the
process that starts Ray, and must not reach another test's Ray.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Mapping
from typing import Any

HOG_BYTES = 5 << 30
MARGIN_BYTES = 5 << 29  # the monitor fires this far above the memory in use before Ray starts: Ray's own processes
# (~1 GB) stay under it, a hog goes over it


class HogWorker:
    def __init__(self, config: Mapping[str, Any], services: Mapping[str, Any]) -> None:
        self.held: list[bytearray] = []

    async def run(self, item: str, attempt: int) -> dict[str, Any]:
        kind, _, name = item.partition(":")
        if kind == "always" or (kind == "hog" and attempt == 1):
            self.held.append(bytearray(b"\x01") * HOG_BYTES)  # touched, so resident
            await asyncio.sleep(60)  # the monitor kills this process long before
        return {"item": name, "attempt": attempt}

    async def close(self) -> dict[str, Any]:
        return {}


def monitor_env(total: int, available: int) -> dict[str, str]:
    """Ray's memory monitor set to fire MARGIN_BYTES above today's use, checking every 100 ms."""
    threshold = (total - available + MARGIN_BYTES) / total
    return {"RAY_memory_usage_threshold": f"{threshold:.4f}", "RAY_memory_monitor_refresh_ms": "100"}


def main(items: list[str]) -> int:
    import psutil

    from rise_batch.errors import run_main
    from rise_batch.executor.base import MapOptions, Stage, WorkerSpec
    from rise_batch.executor.ray import RayExecutor

    vm = psutil.virtual_memory()
    os.environ.update(monitor_env(vm.total, vm.available))
    results: dict[str, Any] = {}
    events: list[str] = []

    def go() -> int:
        stage = Stage(
            worker=WorkerSpec("tests.executor.oom_stage:HogWorker", {}, name="HogWorker"),
            what="hog",
            on_result=lambda item, result: results.__setitem__(item, result),
            on_event=lambda event, item, fields: events.append(event),
        )
        options = MapOptions(max_in_flight=2, per_worker=2, max_attempts=3, worker_memory=1 << 28)
        RayExecutor(1, options).map(stage, items)
        print(json.dumps({"results": results, "events": events}))
        return 0

    return run_main(go, "oom-stage")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
