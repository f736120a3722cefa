"""The project's documentation as tests read it: its Markdown files, their fenced shell blocks, and the
`rise-batch` commands quoted in them, split the way a shell splits them."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import NamedTuple

from tests.conftest import REPO

SHELL_LANGS = ("bash", "sh", "shell", "console")
OPERATORS = {"&&", "||", "|", ";", "&", "(", ")"}
_FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def doc_files() -> list[Path]:
    """Every Markdown file of the documentation: the README, the guides, the maintainers' pages, bench's README."""
    names = ["README.md", "ARCHITECTURE.md", "CONTRIBUTING.md", "bench/README.md"]
    files = [REPO / n for n in names if (REPO / n).exists()]
    return files + sorted((REPO / "docs").glob("*.md"))


def without_code(text: str) -> str:
    """The text with its fenced code blocks removed (a `# comment` in a shell block is not a heading)."""
    return _FENCE.sub("", text)


def shell_blocks(text: str) -> list[str]:
    """The bodies of the fenced code blocks marked as shell."""
    return [body for lang, body in _FENCE.findall(text) if lang in SHELL_LANGS]


def shell_lines(block: str) -> list[str]:
    """The block's command lines, backslash-continued lines joined."""
    return [line for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def split_commands(line: str) -> list[list[str]]:
    """One shell line as the simple commands it runs: words as the shell gives them to the program (quotes
    removed), split at `&&`, `|`, `;`, `&`, comments dropped."""
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    lex.commenters = "#"
    commands: list[list[str]] = [[]]
    for word in lex:
        if word in OPERATORS:
            commands.append([])
        else:
            commands[-1].append(word)
    return [c for c in commands if c]


class Quoted(NamedTuple):
    path: Path
    line: str
    argv: list[str]  # the words after the program's name


def quoted_commands(program: str, files: list[Path] | None = None) -> list[Quoted]:
    """Every `program ...` command of the documentation's shell blocks."""
    found = []
    for path in files if files is not None else doc_files():
        for block in shell_blocks(path.read_text(encoding="utf-8")):
            for line in shell_lines(block):
                for words in split_commands(line):
                    if words[0] == program:
                        found.append(Quoted(path, line.strip(), words[1:]))
    return found
