"""Entry point for `ray job submit`: a whole evaluation sweep (systems x models x K x corpora x repeats).

    ray job submit --working-dir . -- python jobs/eval_sweep.py --config jobs/sweep_table1.yaml

Every cell is a run directory under OUT/cells/<cell>/ (trajectories + judgments), OUT/sweep.json records the
finished cells, and OUT/report/ holds report.md, report.json and the figures. Re-submitting the same command
resumes: finished cells are skipped, unfinished ones continue where they stopped. `--dry-run` lists the cells
after validating every one of them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the job's working dir holds the package

from rise_batch.commands.job_paths import add_base_flag, anchor_paths  # noqa: E402
from rise_batch.errors import run_main  # noqa: E402
from rise_batch.eval.sweep import cell_dir, load_sweep_config  # noqa: E402
from rise_batch.eval.sweep_runner import plan_sweep, run_sweep  # noqa: E402
from rise_batch.logs import add_output_flags, pop_output_flags  # noqa: E402
from rise_batch.option_paths import URI, check_path_args, path_argument  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    path_argument(parser, "--config", path=URI, required=True, help="sweep YAML (see jobs/sweep_*.yaml)")
    parser.add_argument("--only", action="append", metavar="CELL", help="run only this cell (repeatable)")
    parser.add_argument("--dry-run", action="store_true", help="validate and list the cells, run nothing")
    parser.add_argument("--force-judge", action="store_true", help="re-grade every cell's answers")
    add_base_flag(parser)
    add_output_flags(parser)  # --log-level, --progress-every: as in `rise-batch`
    args = parser.parse_args(argv)
    log_level, every = pop_output_flags(args)
    # the CLI's exit codes (rise_batch.errors)
    return run_main(
        lambda: check_path_args(parser, args) or _run(args), "eval_sweep", log_level=log_level, progress_every=every
    )


def _run(args: argparse.Namespace) -> int:
    cfg = anchor_paths(load_sweep_config(args.config), args.base, "sweep")
    if args.dry_run:
        for cell, run in plan_sweep(cfg):
            print(f"{cell.cell_id}\tworkers={run.workers}\t{cell_dir(cfg, cell)}")
        return 0
    result = run_sweep(cfg, only=args.only, force_judge=args.force_judge)
    print(json.dumps(result, indent=2))
    return 0 if not result["incomplete"] else 1


if __name__ == "__main__":
    sys.exit(main())
