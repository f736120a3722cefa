"""The CLI accepts the same flags with the same defaults as before the flags were made from the config dataclasses'
field metadata: every parser's option strings, dests, parsed defaults, types, choices and --help sections equal the
snapshot taken before (data/cli_options.json, tests/commands/cli_snapshot.py). Only help texts may differ."""

from __future__ import annotations

import json

import pytest

from tests.commands.cli_snapshot import SNAPSHOT, snapshot

BEFORE = json.loads(SNAPSHOT.read_text())
NOW = snapshot()


def test_the_same_parsers_exist() -> None:
    assert sorted(NOW) == sorted(BEFORE)


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_a_parser_accepts_the_same_flags_with_the_same_defaults(name: str) -> None:
    before, now = BEFORE[name], NOW.get(name, {"options": [], "set_defaults": {}})
    flags = lambda d: sorted(s for o in d["options"] for s in o["option_strings"])  # noqa: E731
    assert flags(now) == flags(before), f"{name}: option strings changed"
    assert now["options"] == before["options"], f"{name}: an option parses differently"
    assert now["set_defaults"] == before["set_defaults"]
