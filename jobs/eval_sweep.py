"""Entry point for `ray job submit`: a whole evaluation sweep (systems x models x K x corpora x repeats).

    ray job submit --working-dir . -- python jobs/eval_sweep.py --config jobs/sweep_table1.yaml --base "$PWD"

What `rise-batch sweep CONFIG` runs, with the same flags (`--only`, `--dry-run`, `--plan`, `--pilot`, `--max-cost`,
`--force-judge`, `--json`, made from the same fields) and the same exit codes. Every cell is a run directory under
OUT/cells/<cell>/ (trajectories + judgments), OUT/sweep.json records the finished cells, and OUT/report/ holds
report.md, report.json and the figures; OUT may be object storage. Re-submitting the same command resumes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the job's working dir holds the package

from rise_batch.commands import sweep  # noqa: E402
from rise_batch.commands.job_paths import add_base_flag  # noqa: E402
from rise_batch.errors import run_main  # noqa: E402
from rise_batch.logs import add_output_flags, pop_output_flags  # noqa: E402
from rise_batch.option_paths import URI, check_path_args, path_argument  # noqa: E402
from rise_batch.registry import load_plugins  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    path_argument(parser, "--config", path=URI, required=True, help="sweep YAML (see jobs/sweep_*.yaml)")
    sweep.add_sweep_flags(parser)
    add_base_flag(parser)
    add_output_flags(parser)  # --log-level, --progress-every: as in `rise-batch`
    args = parser.parse_args(argv)
    log_level, every = pop_output_flags(args)
    # the CLI's exit codes (rise_batch.errors)
    return run_main(lambda: check_path_args(parser, args) or _run(args), "eval_sweep",
                    log_level=log_level, progress_every=every)  # fmt: skip


def _run(args: argparse.Namespace) -> int:
    load_plugins()  # $RISE_BATCH_PLUGINS' entries (a retriever of one's own), as `rise-batch` loads them
    return sweep.run(args, args.base, "eval_sweep")


if __name__ == "__main__":
    sys.exit(main())
