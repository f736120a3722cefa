"""Running a sweep: every cell through the trajectory engine, then the judge, then one report; resumable per cell.

Cells run one after another in this driver. A cell with Ray workers fans its queries out over the cluster (the
engine's own dispatcher and rate-limiter actor); the first such cell attaches the driver to the cluster and every
later cell reuses it. The judge runs in the driver between cells, against one limiter actor shared by all cells
(or an in-process limiter when no cell uses Ray), so the judge's rate budget holds across the whole sweep. A cell
is marked done in `OUT/sweep.json` only when every query has a trajectory and every judgeable one a judgment;
anything less is simply run again (each layer resumes on its own, so nothing is paid twice).
"""

from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path
from typing import Any

from rise_batch.agent.job import run_trajectories
from rise_batch.eval.judging import judge_run_sync
from rise_batch.eval.report import write_report
from rise_batch.eval.sweep import SweepConfig, cell_dir, cell_run_config, expand, judge_llm_config
from rise_batch.io import read_json, write_json_atomic

STATE = "sweep.json"


def _state(out: Path, name: str) -> dict[str, Any]:
    path = out / STATE
    if path.is_file():
        state = read_json(path)
        if state.get("name") not in (None, name):
            raise ValueError(f"{out} holds sweep {state.get('name')!r}, not {name!r}: choose another out")
        return state
    return {"name": name, "cells": {}}


def _log(msg: str) -> None:
    print(f"eval_sweep: {msg}", file=sys.stderr, flush=True)


class _JudgeLimiter:
    """One judge rate budget for the whole sweep: a Ray limiter actor when the sweep uses Ray, else nothing (each
    cell's judge then builds its own in-process limiter from the same settings; cells do not overlap)."""

    def __init__(self, cfg: SweepConfig, llm: Any, uses_ray: bool, env: tuple[str, ...] = ()) -> None:
        """`env`: the variables the cells' agents need (their key's), lent to every actor with the judge's own."""
        self.name: str | None = None
        self._handle: Any = None
        self.concurrency = llm.concurrency
        if uses_ray:
            from rise_batch.executor.ray import init_ray  # lazy: loads ray (Ray runs only)
            from rise_batch.llm.limiter_actor import start_limiter  # lazy: loads ray (Ray runs only)

            init_ray(cfg.run.get("ray_address"), env=(*env, llm.api_key_env))  # the process's first init decides
            key = hashlib.sha256(f"judge\0{cfg.name}\0{cfg.out}\0{llm.model}".encode()).hexdigest()[:16]
            self.name, self._handle = start_limiter(llm, key)

    def limiter(self) -> Any:
        if self.name is None:
            return None
        from rise_batch.llm.limiter_actor import RemoteLimiter  # lazy: loads ray (Ray runs only)

        return RemoteLimiter(self.name, self.concurrency)


def plan_sweep(cfg: SweepConfig) -> list[tuple[Any, Any]]:
    """(cell, RunConfig) for every cell, all validated before anything runs."""
    return [(cell, cell_run_config(cfg, cell)) for cell in expand(cfg)]


def run_sweep(cfg: SweepConfig, *, only: list[str] | None = None, force_judge: bool = False) -> dict[str, Any]:
    t0 = time.monotonic()
    plan = plan_sweep(cfg)
    if only:
        unknown = set(only) - {c.cell_id for c, _ in plan}
        if unknown:
            raise ValueError(f"unknown cell(s) {sorted(unknown)}; cells: {[c.cell_id for c, _ in plan]}")
        plan = [(c, r) for c, r in plan if c.cell_id in only]
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    state = _state(out, cfg.name)
    judge_llm = judge_llm_config(cfg.judge) if cfg.judge.enabled else None
    keys = tuple(dict.fromkeys(r.llm.api_key_env for _, r in plan))
    judge_limiter = _JudgeLimiter(cfg, judge_llm, any(r.workers >= 1 for _, r in plan), keys) if judge_llm else None
    ran = skipped = 0
    for i, (cell, run_cfg) in enumerate(plan, 1):
        cid = cell.cell_id
        entry = state["cells"].get(cid, {})
        if entry.get("status") == "done" and not force_judge:
            skipped += 1
            _log(f"[{i}/{len(plan)}] {cid}: done before, skipped")
            continue
        _log(f"[{i}/{len(plan)}] {cid}: running")
        write_json_atomic(cell_dir(cfg, cell) / "cell.json", cell.labels())
        stats = run_trajectories(run_cfg, incomplete_ok=True)  # a cell left incomplete is run again by a re-run
        entry = {"status": "incomplete", "run": stats, "labels": cell.labels()}
        complete = stats.get("missing", 0) == 0 and stats.get("retryable", 0) == 0
        if judge_llm is not None and judge_limiter is not None:
            judged = judge_run_sync(
                cell_dir(cfg, cell),
                judge_llm,
                mode=cfg.judge.mode,
                poll_s=cfg.judge.poll_s,
                force=force_judge,
                limiter=judge_limiter.limiter(),
                prompt=cfg.judge.prompt,
            )
            entry["judge"] = judged.as_dict()
            complete = complete and judged.failed == 0 and judged.unjudged_total == 0  # unjudged: graded again
        entry["status"] = "done" if complete else "incomplete"
        state["cells"][cid] = entry
        write_json_atomic(out / STATE, state)
        ran += 1
        _log(f"[{i}/{len(plan)}] {cid}: {entry['status']} (${stats.get('cost_usd', 0):.4f} agent)")
    result: dict[str, Any] = {
        "name": cfg.name,
        "cells": len(plan),
        "ran": ran,
        "skipped": skipped,
        "incomplete": sorted(c for c, e in state["cells"].items() if e.get("status") != "done"),
    }
    if cfg.report:
        dirs = [cell_dir(cfg, c) for c, _ in plan_sweep(cfg) if (cell_dir(cfg, c) / "trajectories").is_dir()]
        report = write_report(dirs, out / "report")
        result["report"] = str(out / "report" / "report.md")
        result["plots"] = report["plots"]
    result["wall_seconds"] = round(time.monotonic() - t0, 3)
    return result
