"""`rise-batch`: argument parsing only; every command calls the same functions the jobs/ scripts call.

Subcommands live in rise_batch/commands/<name>.py and are imported when the parser is built, and their heavy
dependencies only when they run, so `rise-batch --help` stays instant.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from rise_batch.errors import ConfigError
from rise_batch.registry import load_plugins

COMMAND_MODULES = [
    "demo",
    "structure",
    "materialize",
    "workspace",
    "fake_llm",
    "index",
    "eval_retrieval",
    "run",
    "judge",
    "sweep",
    "report",
    "export",
    "plan",
    "cache",
    "status",
]


def build_parser() -> argparse.ArgumentParser:
    load_plugins()  # $RISE_BATCH_PLUGINS' entries join the registries before choices and help are made from them
    parser = argparse.ArgumentParser(
        prog="rise-batch",
        description=(
            "Batch engine for RISE (Retrieving Interaction SpacE): structure a corpus with tables of contents, "
            "build a BM25 index, and run agent trajectories over per-query workspaces. "
            "Start with `rise-batch demo`."
        ),
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"rise_batch.commands.{name}").add_parser(sub)
    for command in sub.choices.values():
        _add_output_flags(command)
    return parser


def _add_output_flags(p: argparse.ArgumentParser) -> None:
    """--log-level and --progress-every on every (sub)command that runs, so they go anywhere after its name."""
    from rise_batch.logs import add_output_flags

    nested = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    for action in nested:
        for command in action.choices.values():
            _add_output_flags(command)
    if not nested:
        add_output_flags(p)


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
    except ConfigError as e:  # $RISE_BATCH_PLUGINS names what cannot be loaded: one line, as any bad input
        print(f"rise-batch: error: {e}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from rise_batch.errors import run_main
    from rise_batch.logs import pop_output_flags
    from rise_batch.option_paths import check_path_args

    # command_name: a subcommand that names itself in full (workspace bash)
    name = f"rise-batch {getattr(args, 'command_name', None) or args.command}"
    log_level, every = pop_output_flags(args)

    def command() -> int:
        check_path_args(parser, args)  # a URI where only a local path is taken: one line naming the option
        return args.func(args)

    return run_main(command, name, program="rise-batch", log_level=log_level, progress_every=every)


if __name__ == "__main__":
    sys.exit(main())
