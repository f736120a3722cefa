"""Where a job stands, read from its output directory alone: `rise-batch status DIR`.

DIR is a run directory (`run.json`), a sweep's OUT (`sweep.json`, `cells/`) or a structuring OUT (`manifest.json`),
local or in object storage, running or finished. Everything here only reads: no lock is taken and nothing is
written, so a job that is running is never disturbed and a finished one is never changed (a status that wrote could
race the job's own writer, or leave a file behind in a bucket someone only meant to look at).

The figures: units done and left (queries, or documents of finished shards), what the directory has spent
(`rise_batch.money.spent.spent_usd`, the figure every reader of the engine prints), the --max-cost cap it was
started with when it recorded one, and the total projected at the dollars per unit spent so far.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from rise_batch.agent.run_stats import RunStats
from rise_batch.io import read_json
from rise_batch.money.spent import spent_usd
from rise_batch.queries import Query, read_queries
from rise_batch.storage import AnyPath, location, redact

RUN, SWEEP, STRUCTURE = "run.json", "sweep.json", "manifest.json"


def _figures(kind: str, where: AnyPath, unit: str, done: int, total: int | None, spent: float) -> dict[str, Any]:
    """The figures every kind shares; `projected_usd` at the dollars per unit done so far (None before any)."""
    left = None if total is None else max(total - done, 0)
    projected = spent / done * total if done and total else None
    return {
        "kind": kind,
        "dir": redact(str(where)),
        "unit": unit,
        "done": done,
        "total": total,
        "left": left,
        "spent_usd": round(spent, 6),
        "projected_usd": None if projected is None else round(projected, 6),
    }


@cache
def _queries(path: str, limit: int | None) -> tuple[Query, ...] | None:
    """The queries a run was started on (None when its query file cannot be read any more); a sweep's cells share
    one file, read once."""
    try:
        return tuple(read_queries(path, limit))
    except (OSError, ValueError):
        return None


def run_status(directory: AnyPath) -> dict[str, Any]:
    """A run directory: queries with a finished trajectory (not one a transient failure or the cap cut), of the
    queries it was started on; its --max-cost as run.json records it."""
    meta = read_json(directory / RUN)
    config = meta.get("config") or {}
    queries = _queries(str(meta["queries"]), config.get("limit")) if meta.get("queries") else None
    if queries is None:  # the query file is gone: what the trajectory files say, with no total
        done = len(list(directory.glob("trajectories/*.json"))) if (directory / "trajectories").is_dir() else 0
    else:
        stats = RunStats.of_files(directory, list(queries), str(meta.get("config_hash")))
        done = stats.trajectories - stats.retryable
    total = None if queries is None else len(queries)
    out = _figures("run", directory, "queries", done, total, spent_usd(directory))
    return out | {"cap_usd": config.get("max_cost_usd"), "system": meta.get("system"), "model": meta.get("model")}


def sweep_status(directory: AnyPath) -> dict[str, Any]:
    """A sweep's OUT: every cell that has started (its run directory), added up; cells sweep.json marks done."""
    state = read_json(directory / SWEEP) if (directory / SWEEP).is_file() else {}
    cells_dir = directory / "cells"
    started = sorted(cells_dir.iterdir(), key=lambda p: p.name) if cells_dir.is_dir() else []
    cells = [run_status(c) | {"cell": c.name} for c in started if (c / RUN).is_file()]
    totals = [c["total"] for c in cells]
    total = None if None in totals else sum(totals)
    spent = sum(c["spent_usd"] for c in cells)
    out = _figures("sweep", directory, "queries", sum(c["done"] for c in cells), total, spent)
    finished = sum(1 for e in (state.get("cells") or {}).values() if e.get("status") == "done")
    return out | {
        "name": state.get("name"),
        "cap_usd": state.get("max_cost_usd"),
        "cells_done": finished,
        "cells": cells,
    }


def structure_status(directory: AnyPath) -> dict[str, Any]:
    """A structuring OUT: documents of the shards with a done marker, of those its manifest planned."""
    manifest = read_json(directory / STRUCTURE)
    shards = manifest.get("shards") or []
    markers = list(directory.glob("stats/shard-*.json")) if (directory / "stats").is_dir() else []
    done = sum(int(read_json(m).get("docs_total") or 0) for m in markers)
    out = _figures("structure", directory, "docs", done, manifest.get("n_docs"), spent_usd(directory))
    return out | {
        "cap_usd": (manifest.get("config") or {}).get("max_cost_usd"),
        "shards": len(shards),
        "shards_done": len(markers),
    }


def job_status(directory: str | AnyPath) -> dict[str, Any]:
    """The status of whatever job wrote `directory`; FileNotFoundError naming it when it holds none."""
    where = location(directory)
    _queries.cache_clear()  # read afresh on every call: a running job's files change
    for name, reader in ((SWEEP, sweep_status), (RUN, run_status), (STRUCTURE, structure_status)):
        if (where / name).is_file() or (name == SWEEP and (where / "cells").is_dir()):
            return reader(where)
    raise FileNotFoundError(
        f"{directory}: holds no run.json, sweep.json or manifest.json; give the --out of a `rise-batch run`, "
        "`sweep` or `structure`"
    )


def _money(s: dict[str, Any]) -> str:
    text = f"spent ${s['spent_usd']:.4f}"
    if s.get("cap_usd") is not None:
        text += f" of ${s['cap_usd']:.2f} cap"
    if s.get("projected_usd") is not None and s.get("left"):
        text += f", projected ${s['projected_usd']:.4f}"
    return text


def _count(s: dict[str, Any]) -> str:
    if s["total"] is None:
        return f"{s['done']:,} {s['unit']} done (total unknown)"
    return f"{s['done']:,}/{s['total']:,} {s['unit']} done, {s['left']:,} left"


def status_lines(s: dict[str, Any]) -> list[str]:
    """What `rise-batch status` prints: one line for the job, and for a sweep one per cell before it."""
    if s["kind"] == "sweep":
        lines = [f"  cell {c['cell']}: {_count(c)}; {_money(c)}" for c in s["cells"]]
        head = f"sweep {s.get('name') or ''} {s['dir']}: {s['cells_done']}/{len(s['cells'])} cells done, "
        return [*lines, head + f"{_count(s)}; {_money(s)}"]
    if s["kind"] == "structure":
        shards = f"{s['shards_done']}/{s['shards']} shards done, "
        return [f"structure {s['dir']}: {shards}{_count(s)}; {_money(s)}"]
    return [f"run {s['dir']}: {s.get('system')} / {s.get('model')}: {_count(s)}; {_money(s)}"]
