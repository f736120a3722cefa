"""Entry point for `ray job submit`: structure a corpus on the cluster the job runs on.

    ray job submit --working-dir . -- python jobs/structure_corpus.py --config jobs/structure_1m.yaml

It parses the same flags as `rise-batch structure` (the YAML config first, flags override) and calls the same
job function; inside a Ray job, `ray.init()` attaches to the job's cluster, so no address is needed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the job's working dir holds the package

from rise_batch.commands.job_paths import add_base_flag, anchor_paths  # noqa: E402
from rise_batch.commands.structure import add_structure_flags, config_from_args  # noqa: E402
from rise_batch.errors import run_main  # noqa: E402
from rise_batch.logs import add_output_flags, pop_output_flags  # noqa: E402
from rise_batch.option_paths import check_path_args  # noqa: E402
from rise_batch.registry import load_plugins  # noqa: E402
from rise_batch.structuring.job import next_commands, run_structure, summary_line  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_structure_flags(parser)
    add_base_flag(parser)
    add_output_flags(parser)  # --log-level, --progress-every: as in `rise-batch`
    args = parser.parse_args(argv)
    log_level, every = pop_output_flags(args)
    # the CLI's exit codes: 2 bad input, 3 --max-cost
    return run_main(
        lambda: check_path_args(parser, args) or _run(args),
        "structure_corpus",
        log_level=log_level,
        progress_every=every,
    )


def _run(args: argparse.Namespace) -> int:
    load_plugins()  # $RISE_BATCH_PLUGINS' entries (a retriever, a format of one's own), as `rise-batch` loads them
    base = args.base
    del args.base  # a job option, not a run setting
    cfg = anchor_paths(config_from_args(args), base, "structure")
    if cfg.n_workers == 0:
        print(
            "structure_corpus: workers=0 runs in the driver process only; set workers >= 1 to use the cluster",
            file=sys.stderr,
        )
    stats = run_structure(cfg)
    print(summary_line(stats, cfg.out))  # once: the full stats are in OUT/stats.json
    for line in next_commands(stats, cfg.out):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
