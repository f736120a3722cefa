"""The documentation stays true to the code: every `rise-batch` command it quotes parses with the real parser and
uses only flags that exist, every relative link (and its #anchor) resolves, every repository path and `file.py:name`
it names exists, and bench/README.md describes every benchmark there is.

Commands are parsed, not all run (the ones that need an API key, a cluster or BrowseComp-Plus could not run here):
the README's free commands (heuristic structuring, a workspace search and bash over it) are run in order, and
tests/commands/test_user_errors.py checks that each page's workspace example searches an index the page builds.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rise_batch.cli import build_parser
from tests.conftest import REPO, SAMPLE
from tests.docs import doc_files, quoted_commands, shell_blocks, shell_lines, without_code

COMMANDS = quoted_commands("rise-batch")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
_PATH = re.compile(r"(?<![\w/.$<>-])((?:bench|jobs|rise_batch|tests|prompts|docs|\.ci)/[\w./<>*{}\[\]-]*)")
_PACKAGE_PATH = re.compile(
    r"(?<![\w/.$-])((?:corpus|structure|structuring|index|space|agent|eval|llm|executor|fake_llm|commands)/\w+\.py)"
)
_SYMBOL = re.compile(r"(?<![\w/.-])((?:\w+/)*\w+\.py)::?(\w+)")
_NOT_IN_TREE = ("bench/results/", "bench/scratch/")


def _subparser(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The (sub)parser that reads the options of `argv`: `workspace search` is two levels down."""
    for word in argv:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or word not in subs[0].choices:
            break
        parser = subs[0].choices[word]
    return parser


def _id(q) -> str:
    return f"{q.path.relative_to(REPO)}: {q.line[:60]}"


def test_the_docs_quote_every_command() -> None:
    """Each subcommand is shown at least once, so each is checked below."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    quoted = {q.argv[0] for q in COMMANDS if q.argv}
    assert set(sub.choices) <= quoted, sorted(set(sub.choices) - quoted)


@pytest.mark.parametrize("quoted", COMMANDS, ids=_id)
def test_every_quoted_command_parses_with_the_real_parser(quoted) -> None:
    parser = build_parser()
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            args = parser.parse_args(quoted.argv)
        except SystemExit as e:
            pytest.fail(f"{quoted.path.name}: `rise-batch {' '.join(quoted.argv)}` does not parse ({e.code}): "
                        f"{err.getvalue().strip()}")  # fmt: skip
    assert getattr(args, "func", None), f"`rise-batch {' '.join(quoted.argv)}` names no command"
    # argparse accepts a flag's unambiguous prefix (`--work 2`): the docs must spell every flag in full
    options = set(_subparser(parser, quoted.argv)._option_string_actions)
    for word in quoted.argv:
        if word == "--":
            break
        flag = word.split("=", 1)[0]
        if flag.startswith("--"):
            assert flag in options, f"{quoted.path.name}: `{flag}` is not an option of `rise-batch {quoted.argv[0]}`"


def test_a_misspelt_flag_is_caught() -> None:
    """The check above sees what argparse forgives: an abbreviation, and an option of another command."""
    parser = build_parser()
    argv = ["index", "--corpus", "c", "--out", "o", "--work", "2"]
    parser.parse_args(argv)  # argparse takes --work for --workers
    assert "--work" not in _subparser(parser, argv)._option_string_actions
    assert "--k" in _subparser(parser, ["eval-retrieval"])._option_string_actions
    assert "--k" not in _subparser(parser, ["structure"])._option_string_actions


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation (backticks, colons, `$`) dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The #anchors of a Markdown file's headings (those outside code blocks), repeats numbered as GitHub does."""
    seen: dict[str, int] = {}
    out = set()
    for heading in _HEADING.findall(without_code(path.read_text(encoding="utf-8"))):
        s = slug(heading)
        out.add(f"{s}-{seen[s]}" if s in seen else s)
        seen[s] = seen.get(s, 0) + 1
    return out


def test_slug_matches_github() -> None:
    assert slug("Cost control: plan, Batch API mode, `--max-cost`, tiers") == (
        "cost-control-plan-batch-api-mode---max-cost-tiers"
    )
    assert slug("Object storage: `s3://` in and out") == "object-storage-s3-in-and-out"
    assert slug("The 1M-document run at or under $300") == "the-1m-document-run-at-or-under-300"


@pytest.mark.parametrize("doc", doc_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    name = doc.relative_to(REPO)
    assert text.strip(), doc
    for target in _LINK.findall(without_code(text)):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        where, _, anchor = target.partition("#")
        path = (doc.parent / where).resolve() if where else doc
        assert path.is_relative_to(REPO), f"{name}: link {target} leaves the repository"
        assert path.exists(), f"{name}: link {target} points to nothing"
        if anchor:
            assert path.suffix == ".md", f"{name}: link {target}: an anchor into a file that is not Markdown"
            assert anchor in anchors(path), f"{name}: link {target}: no such heading in {path.name}"


@pytest.mark.parametrize("doc", doc_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_path_and_name_quoted_exists(doc: Path) -> None:
    """`bench/retrievers.py`, `structuring/shard.py` (a module of the package), `cli.py:main`: what the docs send a
    reader to must be there; results and scratch files are made by the benchmarks, placeholders are left alone."""
    text = doc.read_text(encoding="utf-8")
    missing = []
    for raw in _PATH.findall(text):
        path = raw.rstrip(".,")
        if any(c in path for c in "<>*{}[]") or path.startswith(_NOT_IN_TREE):
            continue
        if "." not in path.rsplit("/", 1)[-1] and not path.endswith("/"):  # a unit (`docs/s`), not a path
            continue
        if not (REPO / path).exists():
            missing.append(path)
    for path in _PACKAGE_PATH.findall(text):
        if not (REPO / "rise_batch" / path).exists():
            missing.append(path)
    for path, name in _SYMBOL.findall(text):
        file = REPO / path if (REPO / path).exists() else REPO / "rise_batch" / path
        if not file.exists():
            missing.append(path)
        elif not re.search(rf"^\s*(?:async def|def|class) {name}\b|^{name}\b[^=\n]*=", file.read_text(), re.M):
            missing.append(f"{path}:{name}")
    assert not missing, f"{doc.relative_to(REPO)} names what is not in the tree: {missing}"


def test_bench_readme_describes_every_benchmark() -> None:
    readme = (REPO / "bench" / "README.md").read_text(encoding="utf-8")
    named = set(re.findall(r"(?<![\w/.])(\w+\.py)\b", readme))
    scripts = {p.name for p in (REPO / "bench").glob("*.py")}
    assert scripts <= named, f"bench/README.md does not describe {sorted(scripts - named)}"
    assert named <= scripts, f"bench/README.md names scripts bench/ does not have: {sorted(named - scripts)}"


def readme_arg(arg: str, tmp_path: Path) -> str:
    """A README argument as the test runs it: the sample in place of `my_corpus/`, README's `/tmp/...` under this
    test's own directory (not a shared /tmp). One pass over the README's text, so a checkout that itself lives
    under /tmp keeps the sample's path."""
    if arg == "my_corpus/":
        return str(SAMPLE)
    return str(tmp_path / arg[len("/tmp/") :]) if arg.startswith("/tmp/") else arg


def test_readme_args_keep_a_checkout_under_tmp(tmp_path: Path) -> None:
    assert readme_arg("my_corpus/", tmp_path) == str(SAMPLE)
    assert readme_arg("/tmp/ws", tmp_path) == str(tmp_path / "ws")
    assert readme_arg("runs/struct", tmp_path) == "runs/struct"


def test_the_readme_free_commands_run_in_order(tmp_path: Path) -> None:
    """The README's commands that need no key, no server and no data beyond a corpus (heuristic structuring with its
    index, then the workspace search and sandboxed bash over it) run as quoted, in order, on the bundled sample in
    place of `my_corpus/`, each exiting 0."""
    readme = [q.argv for q in quoted_commands("rise-batch", [REPO / "README.md"])]
    free = [a for a in readme if a[0] == "structure" and "heuristic" in a and "--index" in a]
    free += [a for a in readme if a[:2] in (["workspace", "search"], ["workspace", "bash"])]
    assert [a[:2] for a in free] == [["structure", "--corpus"], ["workspace", "search"], ["workspace", "bash"]], free
    if not shutil.which("bwrap"):
        free = free[:2]  # the sandboxed bash needs bubblewrap
    env = os.environ | {"PYTHONPATH": str(REPO)}
    for argv in free:
        argv = [readme_arg(a, tmp_path) for a in argv]
        done = subprocess.run(
            [sys.executable, "-m", "rise_batch.cli", *argv], cwd=tmp_path, env=env, capture_output=True, text=True,
            timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, (argv, done.stdout[-2000:], done.stderr[-2000:])


def test_ci_runs_the_readme_test_command() -> None:
    """`.ci/run` runs the README's quick-start test command, verbatim: what a newcomer types is what CI checks."""
    ci = (REPO / ".ci" / "run").read_text().strip().splitlines()[-1]
    blocks = shell_blocks((REPO / "README.md").read_text(encoding="utf-8"))
    readme = [line.strip() for block in blocks for line in shell_lines(block)]
    assert ci in readme, (ci, readme[:3])
