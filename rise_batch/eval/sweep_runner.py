"""Running a sweep: every unfinished cell's queries in one queue, each cell judged as soon as it is in, one report.

Every cell is prepared as a run (eval/sweep_queue.py), then the pending queries of all of them go through one pool of
workers, so no actor idles through one cell's slow tail while others have work. When a cell's last trajectory is
back, a driver thread judges it (one cell at a time, against one limiter for the whole sweep: a Ray actor when the
sweep uses Ray, else one in-process limiter) while the other cells' trajectories run, and records it in
`OUT/sweep.json`: a cell is marked done only when every query has a trajectory and every judgeable one a judgment;
anything less is simply run again (each layer resumes on its own, so nothing is paid twice).

OUT may be object storage: each cell's run directory is a prefix there, sweep.json is put whole each time it
changes (one writer: this driver, under a lock), the report is drawn locally and put there, and a resume reads it
all back from the bucket.

`--max-cost` is one limit on the whole sweep's total: what every cell's trajectory and judgment files record
(`spent_usd`, earlier invocations and cut trajectories included) plus what this one spends. One budget is started
for it (`HeldCap`: a CostBudget in process, a BudgetActor on Ray) and every model call reserves its worst case from
it, the cells' agents on any worker and the driver's judgings alike; once one is refused no new trajectory or
judgment starts, the trajectories it cut end as `budget` (retryable, their spend kept) and the sweep exits 3 with one
line. A higher cap resumes: nothing finished runs again.
"""

from __future__ import annotations

import hashlib
import sys
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from rise_batch.agent.job import Progress, prepare_run
from rise_batch.agent.pilot import pilot_sample, require_plan_price
from rise_batch.agent.run_stats import RunStats
from rise_batch.dirlock import claim, holding
from rise_batch.errors import with_result
from rise_batch.eval.judging import judge_run_sync
from rise_batch.eval.report import write_report
from rise_batch.eval.report_spend import directory_spend, total_spend
from rise_batch.eval.sweep import SweepConfig, SweepRun, cell_dir, cell_run_config, expand, judge_llm_config
from rise_batch.eval.sweep_plan import cell_plan, plan_total
from rise_batch.eval.sweep_queue import CellRun, prepare_cells, run_queue
from rise_batch.io import make_output_dir, read_json, write_json_atomic
from rise_batch.llm.cost_cap import HeldCap
from rise_batch.llm.spend import BudgetExceeded, CostLimitReached, require_cap_price
from rise_batch.money.spent import spent_usd as directory_spent_usd
from rise_batch.storage import AnyPath, child, location, redact

STATE = "sweep.json"


class SweepBudgetSpent(CostLimitReached):
    """The sweep's records already reach its --max-cost: nothing new starts; a higher cap resumes."""


class SweepState:
    """OUT/sweep.json: the finished cells, written whole (an object in object storage) by one writer at a time."""

    def __init__(self, out: AnyPath, name: str) -> None:
        self.path = out / STATE
        self.lock = threading.Lock()
        self.data: dict[str, Any] = {"name": name, "cells": {}}
        if self.path.is_file():
            self.data = read_json(self.path)
            if self.data.get("name") not in (None, name):
                raise ValueError(f"{out} holds sweep {self.data.get('name')!r}, not {name!r}: choose another out")

    @property
    def cells(self) -> dict[str, Any]:
        return self.data["cells"]

    def record(self, cid: str, entry: dict[str, Any]) -> None:
        with self.lock:
            self.cells[cid] = entry
            write_json_atomic(self.path, self.data)

    def record_cap(self, limit: float | None) -> None:
        """This invocation's --max-cost (None: none), for `rise-batch status` to show beside the spend."""
        with self.lock:
            self.data["max_cost_usd"] = limit
            write_json_atomic(self.path, self.data)

    def record_spend(self, cfg: SweepConfig) -> dict[str, float]:
        """What every cell of the grid has spent (agents, judge, `spent_usd`: its directory's total), into each
        recorded cell's entry and, added up, the sweep's own `spent_usd` and `spent`; written, and returned."""
        spends = {c.cell_id: directory_spend(cell_dir(cfg, c)) for c in expand(cfg)}
        with self.lock:
            for cid, spend in spends.items():
                if cid in self.cells:
                    self.cells[cid]["spent"] = spend
            total = total_spend(spends.values())
            self.data["spent_usd"], self.data["spent"] = total["spent_usd"], total
            write_json_atomic(self.path, self.data)
        return total


def _log(msg: str) -> None:
    print(f"eval_sweep: {msg}", file=sys.stderr, flush=True)


class _JudgeLimiter:
    """One judge rate budget for the whole sweep: a Ray limiter actor when the sweep uses Ray, else nothing (each
    cell's judge then builds its own in-process limiter from the same settings; judgings do not overlap)."""

    def __init__(self, cfg: SweepConfig, llm: Any, uses_ray: bool, env: tuple[str, ...] = ()) -> None:
        """`env`: the variables the cells' agents need (their key's), lent to every actor with the judge's own."""
        self.name: str | None = None
        self._handle: Any = None
        self.concurrency = llm.concurrency
        if uses_ray:
            from rise_batch.executor.ray import init_ray  # lazy: loads ray (Ray runs only)
            from rise_batch.llm.limiter_actor import start_limiter  # lazy: loads ray (Ray runs only)

            init_ray(cfg.run.get("ray_address"), env=(*env, llm.api_key_env))  # the process's first init decides
            # this invocation's own: a sweep re-run in one process (a test, a notebook) must not find the earlier
            # invocation's actor by name while Ray reclaims it (the lookup then fails)
            basis = f"judge\0{cfg.name}\0{redact(cfg.out)}\0{llm.model}\0{uuid.uuid4()}"
            key = hashlib.sha256(basis.encode()).hexdigest()[:16]
            self.name, self._handle = start_limiter(llm, key)

    def limiter(self) -> Any:
        if self.name is None:
            return None
        from rise_batch.llm.limiter_actor import RemoteLimiter  # lazy: loads ray (Ray runs only)

        return RemoteLimiter(self.name, self.concurrency)


def plan_sweep(cfg: SweepConfig, only: list[str] | None = None) -> list[tuple[Any, Any]]:
    """(cell, RunConfig) for every cell (or the `only` ones), all validated before anything runs."""
    plan = [(cell, cell_run_config(cfg, cell)) for cell in expand(cfg)]
    if only:
        unknown = set(only) - {c.cell_id for c, _ in plan}
        if unknown:
            raise ValueError(f"--only: unknown cell(s) {sorted(unknown)}; cells: {[c.cell_id for c, _ in plan]}")
        plan = [(c, r) for c, r in plan if c.cell_id in only]
    return plan


def spent_usd(cfg: SweepConfig) -> float:
    """All the sweep's OUT has paid, agents and judge, every cell (money/spent.py: the cells' spend journals, a
    killed driver's calls at their worst case). What the sweep's cap is on, asked afresh on every invocation."""
    return directory_spent_usd(cfg.out)


def sweep_cap(
    cfg: SweepConfig, todo: list[tuple[Any, Any]], judge_llm: Any, uses_ray: bool, env: tuple[str, ...]
) -> HeldCap | None:
    """The sweep's one budget (None without --max-cost), after every model it would call is checked to have a
    price and a reply cap (nothing is paid before); SweepBudgetSpent when the records already reach the limit.
    On Ray a BudgetActor on this node (`env`: the variables every actor is lent, the process's first init decides)."""
    if cfg.max_cost_usd is None or not todo:
        return None
    llms = [r.llm for _, r in todo] + ([judge_llm] if judge_llm is not None else [])
    for llm in llms:
        require_cap_price(llm.model, llm.prices_file, cfg.max_cost_usd, llm.max_output_tokens)
    if uses_ray:
        from rise_batch.executor.ray import init_ray  # lazy: loads ray (Ray runs only)

        init_ray(cfg.run.get("ray_address"), env=env)
    try:
        return HeldCap(cfg.max_cost_usd, lambda: spent_usd(cfg), "ray" if uses_ray else "local")
    except BudgetExceeded as e:
        raise SweepBudgetSpent(
            f"sweep {cfg.name}: its records already show ${e.spent:,.4f} spent, at or over --max-cost "
            f"${cfg.max_cost_usd:,.4f}; nothing started. Re-run with a higher --max-cost to continue."
        ) from None


def cap_line(cfg: SweepConfig, state: SweepState, plan: list[tuple[Any, Any]]) -> str:
    """The one line a sweep stopped at its --max-cost ends with: what its files record, what was cut, how to go on."""
    cut = 0
    for c, _ in plan:
        entry = (state.cells.get(c.cell_id) or {}).get("run") or {}
        cut += (entry.get("stop_reasons") or {}).get("budget", 0)
    done = sum(1 for c, _ in plan if (state.cells.get(c.cell_id) or {}).get("status") == "done")
    return (
        f"sweep {cfg.name}: stopped at the cost limit: the sweep has spent ${spent_usd(cfg):.4f} of --max-cost "
        f"${cfg.max_cost_usd:.4f} (what its cells' spend journals record); {done} of "
        f"{len(plan)} cells are done, trajectories cut by the limit end with stop reason budget (marked retryable, "
        f"their spend recorded){f', {cut} in cells already recorded' if cut else ''}. Re-run the same command with a "
        f"higher --max-cost to continue: finished work is not paid again. (out={redact(cfg.out)})"
    )


class _Cells:
    """What happens to a cell once its trajectories are in: its stats, its judging, its line in sweep.json."""

    def __init__(
        self, cfg: SweepConfig, state: SweepState, n: int, force_judge: bool, judge: Any, cap: HeldCap | None
    ) -> None:
        self.cfg, self.state, self.n, self.force_judge, self.cap = cfg, state, n, force_judge, cap
        self.judge_llm, self.judge_limiter = judge
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sweep-cell")  # judgings one at a time
        self.futures: list[Future] = []
        self.index: dict[str, int] = {}
        self.t0 = time.monotonic()
        self.progress: Progress | None = None  # the queue's line: each judging's dollars go into its spend

    def submit(self, run: CellRun) -> None:
        self.futures.append(self.pool.submit(self.finish, run))

    def finish(self, run: CellRun) -> None:
        plan, cid = run.plan, run.cid
        i = self.index.get(cid, 0)
        stats = RunStats.of_files(plan.cfg.out, plan.queries, plan.config_hash)
        stats.system, stats.model, stats.config_hash = plan.cfg.system, plan.cfg.llm.model, plan.config_hash
        stats.ran, stats.skipped = len(plan.pending), len(plan.queries) - len(plan.pending)
        stats.wall_seconds = time.monotonic() - self.t0
        if run.nodes:  # on Ray: how many of the cell's queries each node ran
            from rise_batch.executor.probe import node_labels  # lazy: loads ray (Ray runs only)

            labels = node_labels()
            stats.nodes = dict(sorted(Counter(labels.get(n, n) for n in run.nodes.values()).items()))
        out = stats.to_json()
        entry: dict[str, Any] = {"status": "incomplete", "run": out, "labels": run.cell.labels()}
        complete = out.get("missing", 0) == 0 and out.get("retryable", 0) == 0
        judge_cost = 0.0
        if self.judge_llm is not None:
            _log(f"[{i}/{self.n}] {cid}: trajectories in; judging")
            judged = judge_run_sync(
                location(plan.cfg.out),
                self.judge_llm,
                mode=self.cfg.judge.mode,
                poll_s=self.cfg.judge.poll_s,
                force=self.force_judge,
                limiter=self.judge_limiter.limiter() if self.judge_limiter else None,
                prompt=self.cfg.judge.prompt,
                cap=self.cap,  # the sweep's one budget, shared with the trajectories still running
            )
            entry["judge"] = judged.as_dict()
            judge_cost = judged.cost_usd - judged.replayed_usd  # what this pass paid: kept replies were paid before
            if self.progress is not None:
                self.progress.judged(judge_cost)
            complete = complete and judged.failed == 0 and judged.unjudged_total == 0  # unjudged: graded again
        entry["status"] = "done" if complete else "incomplete"
        entry["spent"] = directory_spend(plan.cfg.out)  # agents, judge, total: what the cell has paid so far
        out["spent_usd"] = entry["spent"]["spent_usd"]  # the cell's journal: its agents and its judging
        self.state.record(cid, entry)
        acc = (entry.get("judge") or {}).get("accuracy")
        _log(
            f"[{i}/{self.n}] cell {cid} {entry['status']} queries={out['queries']} ran={out['ran']} "
            f"skipped={out['skipped']} accuracy={'-' if acc is None else f'{100 * acc:.1f}%'} "
            f"agent_usd={out['cost_usd']:.4f} judge_usd={judge_cost:.4f}"
        )

    def wait(self) -> None:
        try:
            for f in self.futures:
                f.result()
        finally:
            self.pool.shutdown(wait=True)


@holding("rise-batch sweep")
def run_sweep(cfg: SweepConfig, run: SweepRun | None = None) -> dict[str, Any]:
    """The sweep (or its `--only` cells); returns its summary. Unfinished cells are resumed, finished ones skipped."""
    run = run or SweepRun()
    t0 = time.monotonic()
    plan = plan_sweep(cfg, run.only)
    out = make_output_dir(location(cfg.out))
    claim(out)  # one writer; each cell's run directory is claimed too, as it is prepared (agent/job.py)
    state = SweepState(out, cfg.name)
    todo = [(c, r) for c, r in plan if state.cells.get(c.cell_id, {}).get("status") != "done" or run.force_judge]
    waiting = {c.cell_id for c, _ in todo}
    for i, (c, _) in enumerate(plan, 1):
        if c.cell_id not in waiting:
            _log(f"[{i}/{len(plan)}] {c.cell_id}: done before, skipped")
    judge_llm = judge_llm_config(cfg.judge) if cfg.judge.enabled else None
    keys = tuple(dict.fromkeys(r.llm.api_key_env for _, r in todo))
    uses_ray = any(r.workers >= 1 for _, r in todo)
    env = (*keys, judge_llm.api_key_env) if judge_llm else keys
    if run.plan:  # a plan in dollars of an unpriced model would be a lie: refused before any pilot is paid
        for llm in [r.llm for _, r in plan] + ([judge_llm] if judge_llm else []):
            require_plan_price(llm.model, llm.prices_file)
    cap = sweep_cap(cfg, todo, judge_llm, uses_ray, env)
    judge_limiter = _JudgeLimiter(cfg, judge_llm, uses_ray, keys) if judge_llm and todo else None
    cells = _Cells(cfg, state, len(plan), run.force_judge, (judge_llm, judge_limiter), cap)
    cells.index = {c.cell_id: i for i, (c, _) in enumerate(plan, 1)}
    if todo:
        state.record_cap(cfg.max_cost_usd)
        for c, _ in todo:
            write_json_atomic(cell_dir(cfg, c) / "cell.json", c.labels())
        runs = prepare_cells(todo)
        if run.plan:  # only each cell's pilot runs: the rest is what the plan prices
            for r in runs:
                r.plan = r.plan._replace(pending=pilot_sample(r.plan, cfg.pilot))
        pending = sum(len(r.plan.pending) for r in runs)
        total = sum(len(r.plan.queries) for r in runs)
        _log(f"{len(runs)} cell(s) to run, {pending} of their {total} queries pending, in one queue")
        shown = runs[0].plan.cfg.progress
        progress = Progress(
            total,
            total - pending,
            shown,
            command="sweep",
            spent_before=spent_usd(cfg) if shown else 0.0,  # every cell's agents and judge, earlier invocations'
            cap=cfg.max_cost_usd,
        )
        cells.progress = progress
        stop: BudgetExceeded | None = None
        try:
            run_queue(runs, progress, cells.submit, env, cap)
        except BudgetExceeded as e:  # what ran is in its files; the cells finished before are still judged
            stop = e
        finally:
            try:
                cells.wait()  # the last cells' judgings: their dollars are in the progress line's last count
            finally:
                progress.close()
            state.record_spend(cfg)
        if cap is not None and (stop is not None or cap.tripped()):  # --json prints the summary all the same
            raise with_result(CostLimitReached(cap_line(cfg, state, plan)), summary(cfg, plan, todo, state, t0))
    if run.plan:
        plans = {r.cid: r.plan for r in runs} if todo else {}
        per_cell = [
            cell_plan(c.cell_id, r, plans.get(c.cell_id) or prepare_run(r), judge_llm, cfg.judge.prompt)
            for c, r in plan
        ]
        return {"name": cfg.name, "pilot": cfg.pilot, "cells": per_cell, "total": plan_total(per_cell)}
    result = summary(cfg, plan, todo, state, t0)
    if cfg.report and (report := report_sweep(cfg)) is not None:
        result["report"] = str(location(child(cfg.out, "report", "report.md")))
        result["plots"] = report["plots"]
    result["wall_seconds"] = round(time.monotonic() - t0, 3)
    return result


def summary(cfg: SweepConfig, plan: list, todo: list, state: SweepState, t0: float) -> dict[str, Any]:
    """The sweep's figures: cells run, skipped and left incomplete, what OUT records it spent."""
    return {
        "name": cfg.name,
        "cells": len(plan),
        "ran": len(todo),
        "skipped": len(plan) - len(todo),
        "incomplete": sorted(c.cell_id for c, _ in plan if state.cells.get(c.cell_id, {}).get("status") != "done"),
        "cost_usd": round(spent_usd(cfg), 6),
        "wall_seconds": round(time.monotonic() - t0, 3),
        # all the grid's cells have paid (recorded in sweep.json once the queue ended, or now when nothing ran)
        "spent_usd": (state.data["spent"] if todo else state.record_spend(cfg))["spent_usd"],
    }


def report_sweep(cfg: SweepConfig) -> dict[str, Any] | None:
    """The sweep's one report, OUT/report/, over every cell of the grid that has trajectories (not only the `--only`
    ones), in the grid's order: the first cell is the one every other is paired with. None when no cell has run.
    bench/report_html.py times this call at the Table 1 grid's size."""
    dirs = [cell_dir(cfg, c) for c in expand(cfg) if (cell_dir(cfg, c) / "trajectories").is_dir()]
    return write_report(dirs, location(child(cfg.out, "report"))) if dirs else None


def summary_line(result: dict[str, Any], out: str) -> str:
    """The sweep's one line: cells run, skipped and left incomplete, what it has spent, where it is."""
    return (
        f"sweep name={result['name']} cells={result['cells']} ran={result['ran']} skipped={result['skipped']} "
        f"incomplete={len(result['incomplete'])} cost_usd={result.get('cost_usd', 0)} "
        f"wall_seconds={result['wall_seconds']} out={redact(out)}"
    )
