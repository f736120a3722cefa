"""Entry point for `ray job submit`: run agent trajectories for a query file on the cluster the job runs on.

    ray job submit --working-dir . -- python jobs/run_trajectories.py --config jobs/run_rise_fake.yaml

It parses the same flags as `rise-batch run` (the YAML config first, flags override) and calls the same job
function; inside a Ray job, `ray.init()` attaches to the job's cluster, so no address is needed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the job's working dir holds the package

from rise_batch.agent.job import run_trajectories, summary_line  # noqa: E402
from rise_batch.commands.job_paths import add_base_flag, anchor_paths  # noqa: E402
from rise_batch.commands.run import add_run_flags, config_from_args  # noqa: E402
from rise_batch.errors import run_main  # noqa: E402
from rise_batch.logs import add_output_flags, pop_output_flags  # noqa: E402
from rise_batch.option_paths import check_path_args  # noqa: E402
from rise_batch.registry import load_plugins  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_run_flags(parser)
    add_base_flag(parser)
    add_output_flags(parser)  # --log-level, --progress-every: as in `rise-batch`
    args = parser.parse_args(argv)
    log_level, every = pop_output_flags(args)
    # the CLI's exit codes (rise_batch.errors)
    return run_main(
        lambda: check_path_args(parser, args) or _run(args),
        "run_trajectories",
        log_level=log_level,
        progress_every=every,
    )


def _run(args: argparse.Namespace) -> int:
    load_plugins()  # $RISE_BATCH_PLUGINS' entries (a retriever, a format of one's own), as `rise-batch` loads them
    base = args.base
    del args.base  # a job option, not a run setting
    cfg = anchor_paths(config_from_args(args), base, "run")
    if cfg.workers == 0:
        print("run_trajectories: workers=0 runs in the driver process only; set workers >= 1", file=sys.stderr)
    stats = run_trajectories(cfg)
    print(summary_line(stats, cfg.out))  # once, as `rise-batch run` prints it
    return 0


if __name__ == "__main__":
    sys.exit(main())
