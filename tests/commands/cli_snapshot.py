"""Every option of every parser a user meets, as data: what a flag accepts and what it parses to, help left out.

The snapshot in data/cli_options.json was taken on the code before the flags were generated from the config
dataclasses (rise_batch/options.py); test_cli_snapshot.py holds today's parsers to it, so generating them changed
help texts only. Rewrite it (`python -m tests.commands.cli_snapshot`) only for a deliberate change of the CLI.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tests.commands.test_help import parsers

SNAPSHOT = Path(__file__).parent / "data" / "cli_options.json"


def _plain(value: Any) -> Any:
    """A JSON-able stand-in: types and functions by name, tuples as lists."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return getattr(value, "__name__", repr(value))


def _groups(parser: argparse.ArgumentParser) -> dict[int, str]:
    """Which --help section each action is listed under (by the action's id)."""
    return {id(a): g.title or "" for g in parser._action_groups for a in g._group_actions}


def describe(parser: argparse.ArgumentParser) -> dict[str, Any]:
    groups = _groups(parser)
    options = []
    for a in parser._actions:
        if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        options.append(
            {
                "option_strings": list(a.option_strings),
                "dest": a.dest,
                "default": _plain(a.default),
                "type": _plain(a.type),
                "choices": _plain(list(a.choices) if a.choices is not None else None),
                "nargs": _plain(a.nargs),
                "const": _plain(a.const),
                "required": a.required,
                "metavar": _plain(a.metavar),
                "action": type(a).__name__,
                "group": groups.get(id(a), ""),
            }
        )
    options.sort(key=lambda o: (o["option_strings"], o["dest"]))
    defaults = {k: _plain(v) for k, v in sorted(parser._defaults.items())}
    return {"options": options, "set_defaults": defaults}


def snapshot() -> dict[str, Any]:
    """{parser name: its options}, for `rise-batch`, every subcommand and every jobs/*.py script."""
    return {name: describe(parser) for name, parser in sorted(parsers(), key=lambda np: np[0])}


if __name__ == "__main__":
    SNAPSHOT.write_text(json.dumps(snapshot(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {SNAPSHOT}")
