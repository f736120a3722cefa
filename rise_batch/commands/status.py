"""`rise-batch status DIR`: where a run, a sweep or a structuring job stands, from its output directory alone."""

from __future__ import annotations

import argparse

from rise_batch.option_paths import URI, path_argument


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "status",
        help="show a run's, a sweep's or a structuring job's done / left, spend, projected total and cap",
        description=(
            "Reads DIR (the --out of `rise-batch run`, `sweep` or `structure`, local or s3://) while the job runs "
            "or after it ended, and prints the work done and left, what the directory has spent, the --max-cost "
            "cap it was started with and the total projected at the dollars per unit so far; a sweep gets a line "
            "per cell. It only reads: no lock is taken and nothing is written."
        ),
    )
    path_argument(p, "dir", path=URI, metavar="DIR", help="a run directory, a sweep's OUT or a structuring OUT")
    p.add_argument("--json", action="store_true", help="print the status as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from rise_batch.eval.job_status import job_status, status_lines

    status = job_status(args.dir)
    print(json.dumps(status, indent=2) if args.json else "\n".join(status_lines(status)))
    return 0
