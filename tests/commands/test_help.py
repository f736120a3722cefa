"""`--help` a newcomer can act on: every option of every subcommand (and of every jobs/ script) says what it does,
the rate limits show their defaults, and the text shows what a user types (`95%`, not argparse's `95%%`)."""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rise_batch.cli import build_parser
from rise_batch.config import LLMConfig

ROOT = Path(__file__).resolve().parents[2]


def parsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every parser a user meets: `rise-batch`, each subcommand (nested ones too) and each jobs/*.py script."""
    todo = [("rise-batch", build_parser())]
    while todo:
        name, parser = todo.pop()
        yield name, parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += [(f"{name} {sub}", p) for sub, p in action.choices.items()]
    for script in sorted((ROOT / "jobs").glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"job_{script.stem}", script)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        captured: list[argparse.ArgumentParser] = []
        original = argparse.ArgumentParser.parse_args

        def capture(self, args=None, namespace=None, seen=captured):
            seen.append(self)
            raise SystemExit(0)

        argparse.ArgumentParser.parse_args = capture
        try:
            with pytest.raises(SystemExit):
                module.main([])
        finally:
            argparse.ArgumentParser.parse_args = original
        yield f"jobs/{script.name}", captured[0]


def test_every_option_of_every_command_has_a_description() -> None:
    missing = [
        f"{name} {'/'.join(a.option_strings) or a.dest}"
        for name, parser in parsers()
        for a in parser._actions
        if not isinstance(a, argparse._SubParsersAction) and (not a.help or not a.help.strip())
    ]
    assert not missing, f"options without help text: {missing}"


def test_no_help_text_shows_a_doubled_percent_sign() -> None:
    doubled = [name for name, parser in parsers() if "%%" in parser.format_help()]
    assert not doubled, f"`%%` shown in --help of {doubled}"


def test_report_help_says_95_percent() -> None:
    out = subprocess.run([sys.executable, "-m", "rise_batch.cli", "report", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "95% interval" in " ".join(out.stdout.split())


def test_rate_limit_flags_show_their_defaults() -> None:
    """500 rpm throttles a local server: a user must see the default to know to raise it."""
    shown = {}
    for name, parser in parsers():
        for a in parser._actions:
            if a.option_strings and a.option_strings[0] in ("--rpm", "--tpm"):
                shown[f"{name} {a.option_strings[0]}"] = " ".join(parser._get_formatter()._expand_help(a).split())
    assert {k.split()[-1] for k in shown} == {"--rpm", "--tpm"} and len(shown) >= 6, shown
    for key, text in shown.items():
        default = LLMConfig.rpm if key.endswith("--rpm") else LLMConfig.tpm
        assert f"default {default:,}" in text or f"default {default}" in text, (key, text)
