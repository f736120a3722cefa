"""bench/ is a package a newcomer can run: every module imports without doing anything, every script answers
`python -m bench.NAME --help` from the repository root, no file edits the import path, and every benchmark command the
docs quote (`python -m bench.NAME ...`, in a shell block or inline) parses with that script's own parser.

Nothing here times anything: the benchmarks measure, the tests only check they can be run as the docs say.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.docs import doc_files, shell_blocks, shell_lines, split_commands

BENCH = REPO / "bench"
MODULES = sorted(p.stem for p in BENCH.glob("*.py") if p.stem != "__init__")
SCRIPTS = [m for m in MODULES if re.search(r"^def main\(", (BENCH / f"{m}.py").read_text(), re.M)]
_PATH_EDIT = re.compile(r"\bsys\.path\s*(?:\.\s*(?:insert|append|extend)|\[[^\]]*\]\s*=|\+?=)")
_INLINE = re.compile(r"`([^`\n]*python[^`\n]*)`")
_ENV = re.compile(r"^\w+=\S*$")


def env() -> dict[str, str]:
    return os.environ | {"PYTHONPATH": str(REPO)}


def test_the_helpers_and_scripts_are_what_bench_holds() -> None:
    """The scripts (with a main) and the helpers (imported by them) together are every module."""
    assert "common" in MODULES and "targets" in SCRIPTS
    assert {"common", "pipeline_checks", "pipeline_prep", "pipeline_probe"} == set(MODULES) - set(SCRIPTS)


def top_level() -> set[Path]:
    dirs = [BENCH, BENCH / "results", BENCH / "scratch"]
    return {p for d in dirs if d.is_dir() for p in d.iterdir() if p.name != "__pycache__"}


def test_importing_every_module_does_nothing() -> None:
    """One fresh interpreter imports them all: no output, and no file appears in bench/, bench/results/ or
    bench/scratch/ (their top levels: a scratch dir may hold a million structured files)."""
    before = top_level()
    code = "import importlib\n" + "".join(f"importlib.import_module('bench.{m}')\n" for m in MODULES)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (done.stdout, done.stderr) == ("", "")
    after = top_level()
    assert after == before, sorted(map(str, after ^ before))


@pytest.mark.parametrize("name", SCRIPTS)
def test_help_runs_as_a_module(name: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{name}", "--help"], cwd=REPO, env=env(), capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith(f"usage: python -m bench.{name}"), done.stdout[:200]


def test_no_bench_file_edits_the_import_path() -> None:
    edits = [
        f"{p.relative_to(REPO)}:{i}"
        for p in sorted(BENCH.rglob("*.py"))
        if p.relative_to(BENCH).parts[0] not in ("scratch", "results")  # work files: a checkout copied for --code
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if _PATH_EDIT.search(line)
    ]
    assert not edits, edits


def test_the_path_edit_pattern_sees_every_form() -> None:
    for line in ("sys.path.insert(0, x)", "sys.path[:0] = [a]", "sys.path.append(x)", "sys.path += [x]"):
        assert _PATH_EDIT.search(line), line
    assert not _PATH_EDIT.search("# put first on sys.path by a site hook")


def bench_commands() -> list[tuple[str, str, list[str]]]:
    """(file, line, argv) of every `python -m bench.X ...` the docs quote, in shell blocks or inline code; a
    leading `nice -n N` and VAR=value assignments are the shell's, not the script's. An old `python bench/X.py`
    form is returned too, as the argv ["bench/X.py", ...], so the test below can refuse it; `bench.NAME` is prose."""
    found = []
    for path in doc_files():
        text = path.read_text(encoding="utf-8")
        lines = [ln for b in shell_blocks(text) for ln in shell_lines(b)]
        lines += _INLINE.findall(text)
        for line in lines:
            try:
                commands = split_commands(line)
            except ValueError:  # an inline span that is not a shell line (an unbalanced quote in prose)
                continue
            for words in commands:
                while words and (_ENV.match(words[0]) or words[0] == "nice"):
                    words = words[3:] if words[0] == "nice" and words[1:2] == ["-n"] else words[1:]
                if words[:1] == ["python"] and len(words) > 1:
                    if words[1] == "-m" and words[2].startswith("bench.") and not words[2][6:].isupper():
                        found.append((str(path.relative_to(REPO)), line.strip(), words[2:]))
                    elif words[1].startswith("bench/"):
                        found.append((str(path.relative_to(REPO)), line.strip(), words[1:]))
    return found


COMMANDS = bench_commands()


def test_the_docs_quote_bench_commands() -> None:
    assert len(COMMANDS) >= 10, COMMANDS
    assert {"targets", "index_scale", "pipeline_1m"} <= {argv[0].removeprefix("bench.") for _, _, argv in COMMANDS}


@pytest.mark.parametrize("quoted", COMMANDS, ids=lambda q: f"{q[0]}: {q[1][:60]}")
def test_every_quoted_bench_command_parses(quoted: tuple[str, str, list[str]]) -> None:
    path, line, argv = quoted
    assert argv[0].startswith("bench."), f"{path}: `{line}`: run benchmarks as `python -m bench.NAME`"
    name = argv[0].removeprefix("bench.")
    assert name in SCRIPTS, f"{path}: `{line}`: bench/ has no script {name}"
    parser = importlib.import_module(f"bench.{name}").build_parser()
    args = argv[1:]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            parser.parse_args(args)
        except SystemExit as e:
            pytest.fail(f"{path}: `{shlex.join(['python', '-m', *argv])}` does not parse ({e.code}): {err.getvalue()}")
    options = parser._option_string_actions
    for word in args:
        if word == "--":
            break
        flag = word.split("=", 1)[0]
        if flag.startswith("--"):  # argparse takes an unambiguous prefix: the docs spell every flag in full
            assert flag in options, f"{path}: `{flag}` is not an option of bench.{name}"


def test_a_bad_bench_command_is_caught() -> None:
    parser = importlib.import_module("bench.targets").build_parser()
    assert isinstance(parser, argparse.ArgumentParser)
    assert "--jso" not in parser._option_string_actions  # what argparse would forgive, the check above refuses
    with contextlib.redirect_stderr(io.StringIO()), pytest.raises(SystemExit):
        parser.parse_args(["--no-such-flag"])


def test_one_envelope_for_every_result(tmp_path: Path) -> None:
    """What `Run.write` puts beside the figures: the benchmark, when, on what (cores, load at the start and the end,
    the commit), the options as given; `read_result` gives it back, and reads a file from before the envelope as
    figures with no machine facts rather than dropping it."""
    from bench.common import Run, read_result

    args = argparse.Namespace(corpus=Path("../shared/data/wiki2015"), limit=3, skip={"b", "a"})
    path = Run("demo", args).write({"docs_per_s": 12.5}, tmp_path / "demo.json", quiet=True)
    doc = read_result(path)
    assert doc is not None
    assert list(doc) == ["bench", "date", "seconds", "machine", "args", "figures"]
    assert (doc["bench"], doc["figures"], doc["args"]) == (
        "demo", {"docs_per_s": 12.5}, {"corpus": "../shared/data/wiki2015", "limit": 3, "skip": ["a", "b"]}
    )  # fmt: skip
    machine = doc["machine"]
    assert machine["cpus"] == os.cpu_count() and len(machine["load_average_start"]) == 3
    if (REPO / ".git").exists():  # a checkout (a worktree's .git is a file), not an unpacked archive
        assert re.fullmatch(r"[0-9a-f]{40}", machine["git_commit"] or ""), machine
    (tmp_path / "old.json").write_text('{"wall_s": 3.0}')
    assert read_result(tmp_path / "old.json")["figures"] == {"wall_s": 3.0}
    assert read_result(tmp_path / "missing.json") is None
