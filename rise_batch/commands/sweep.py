"""`rise-batch sweep CONFIG`: a whole evaluation sweep (systems x models x K x retrievers x corpora x repeats).

The same function as `jobs/eval_sweep.py` (the entry for `ray job submit`), with flags made from the same fields
(`eval.sweep.SweepRun`), so the command and the job take the same options and exit the same way.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rise_batch.eval.sweep import SweepRun
from rise_batch.option_paths import URI, path_argument
from rise_batch.options import Layout, Section, add_layout

# docs/agents.md's table is made from this too (rise_batch/commands/doc_options.py)
SWEEP_OPTIONS = Layout(
    SweepRun,
    (Section(None, ("only", "dry_run", "plan", "pilot", "max_cost_usd", "force_judge")),),
    from_file=False,
)


def add_sweep_flags(p: argparse.ArgumentParser) -> None:
    """The flags `rise-batch sweep` and jobs/eval_sweep.py share (the config is each one's own: a positional here,
    `--config` in the job, as the other jobs take it)."""
    groups = add_layout(p, SWEEP_OPTIONS)
    groups[None].add_argument("--json", action="store_true", help="print the summary (or the plan) as JSON")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sweep",
        help="run an evaluation sweep (a grid of systems, models, K, retrievers, corpora) from a YAML config",
        description=(
            "Run every cell of a sweep config (see jobs/sweep_*.yaml): one run directory per cell under "
            "OUT/cells/<cell>/, the queries of all unfinished cells in one queue over one pool of workers, each "
            "cell judged as soon as its trajectories are in and recorded in OUT/sweep.json, then OUT/report/. OUT, "
            "docs, index and queries may be object storage (s3://...). Re-run the same command to resume: finished "
            "cells are skipped, unfinished ones continue where they stopped. Exits 75 when cells are left "
            "incomplete, 3 at --max-cost."
        ),
    )
    path_argument(
        p, "config", path=URI, metavar="CONFIG", help="sweep YAML (its `sweep:` mapping or the mapping itself)"
    )
    add_sweep_flags(p)
    p.set_defaults(func=run)


def sweep_run(args: argparse.Namespace) -> SweepRun:
    return SweepRun(**{k: getattr(args, k) for k in SweepRun.__dataclass_fields__})


def run(args: argparse.Namespace, base: str | None = None, name: str = "rise-batch sweep") -> int:
    """The command's work, also the job's (`base`: the job's --base; `name` starts its lines)."""
    from rise_batch.commands.job_paths import anchor_paths
    from rise_batch.errors import RunIncomplete, with_result
    from rise_batch.eval.sweep import load_sweep_config, with_run

    opts = sweep_run(args)
    cfg = with_run(anchor_paths(load_sweep_config(args.config), base, "sweep"), opts)
    if opts.dry_run:
        return dry_run(cfg, opts, args.json)
    from rise_batch.commands.json_exit import json_on_every_exit
    from rise_batch.commands.plan_check import check_sweep, save_plan
    from rise_batch.eval.sweep_plan import plan_table
    from rise_batch.eval.sweep_runner import run_sweep, spent_usd, summary_line

    # --json on every exit: at --max-cost (3) the summary of what ran (or what OUT records when nothing started),
    # with cells incomplete (75) the summary
    with json_on_every_exit(args.json, lambda: {"name": cfg.name, "cost_usd": round(spent_usd(cfg), 6)}, indent=2):
        result = run_sweep(cfg, opts)
        dirs = cell_dirs(cfg, None)  # every cell: a plan of some cells (--only) is checked after a whole sweep too
        checked = None if opts.plan else check_sweep(cfg.out, dirs)
        if checked:
            result = result | {"planned": checked[1]}
        if not opts.plan and result["incomplete"]:
            if not args.json:
                print(summary_line(result, cfg.out))
                if checked:
                    print(f"sweep {cfg.name}: {checked[0]}")
            left = RunIncomplete(
                f"{len(result['incomplete'])} of {result['cells']} cells are incomplete (first: "
                f"{result['incomplete'][0]}; see OUT/sweep.json); re-run the same command to resume them"
            )
            raise with_result(left, result)
    if opts.plan:
        save_plan(cfg.out, result, [dirs[c["cell"]] for c in result["cells"]])  # the sweep after checks against it
        print(json.dumps(result, indent=2) if args.json else plan_table(result["cells"], result["total"]))
        return 0
    print(json.dumps(result, indent=2) if args.json else summary_line(result, cfg.out))
    if checked and not args.json:
        print(f"sweep {cfg.name}: {checked[0]}")
    return 0


def cell_dirs(cfg: Any, only: list[str] | None) -> dict[str, Any]:
    """Each cell's run directory (the `only` ones), by cell id."""
    from rise_batch.eval.sweep import cell_dir
    from rise_batch.eval.sweep_runner import plan_sweep

    return {cell.cell_id: cell_dir(cfg, cell) for cell, _ in plan_sweep(cfg, only)}


def dry_run(cfg: Any, opts: SweepRun, as_json: bool) -> int:
    """Every cell validated and listed with its run directory and its queries already done; nothing runs."""
    from rise_batch.eval.sweep import cell_dir
    from rise_batch.eval.sweep_runner import plan_sweep

    rows = []
    for cell, run in plan_sweep(cfg, opts.only):
        where = cell_dir(cfg, cell) / "trajectories"
        done = sum(1 for p in where.glob("*.json")) if where.is_dir() else 0
        rows.append({"cell": cell.cell_id, "workers": run.workers, "done": done, "out": str(cell_dir(cfg, cell))})
    if as_json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            print(f"{r['cell']}\tworkers={r['workers']}\tdone={r['done']}\t{r['out']}")
    print(f"sweep {cfg.name}: {len(rows)} cells, nothing run (--dry-run)", file=sys.stderr)
    return 0
