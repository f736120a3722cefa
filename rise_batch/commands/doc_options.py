"""The docs' option tables, made from the same layouts as the commands' flags (rise_batch/options.py).

A guide marks where a command's table goes:

    <!-- options: structure -->
    (the generated table)
    <!-- /options -->

`python -m rise_batch.commands.doc_options structure` prints a table; `--write FILE...` rewrites every marked table
of those files in place. tests/commands/test_doc_options.py checks that each guide's tables are what this writes, so
a default changed on its config field cannot leave the docs behind.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from rise_batch.commands.judge import JUDGE_OPTIONS
from rise_batch.commands.run import RUN_OPTIONS
from rise_batch.commands.structure import STRUCTURE_OPTIONS
from rise_batch.options import Layout, markdown_table

# command -> (its layout, where its keys sit in a config file)
TABLES: dict[str, tuple[Layout, str]] = {
    "structure": (STRUCTURE_OPTIONS, ""),
    "run": (RUN_OPTIONS, ""),
    "judge": (JUDGE_OPTIONS, "judge."),  # a sweep's judge: section
}
_BLOCK = re.compile(r"(<!-- options: ([\w-]+) -->\n)(.*?)(<!-- /options -->)", re.DOTALL)


def table(command: str) -> str:
    if command not in TABLES:
        raise SystemExit(f"doc_options: no option table for {command!r}; known: {', '.join(TABLES)}")
    layout, prefix = TABLES[command]
    return markdown_table(layout, prefix)


def fill(text: str) -> str:
    """`text` with every marked table replaced by the generated one."""
    return _BLOCK.sub(lambda m: m.group(1) + table(m.group(2)) + m.group(4), text)


def marked(text: str) -> list[str]:
    """The commands whose tables `text` marks."""
    return [m.group(2) for m in _BLOCK.finditer(text)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rise_batch.commands.doc_options", description=__doc__)
    parser.add_argument("command", nargs="?", choices=list(TABLES), help="print this command's table")
    parser.add_argument("--write", nargs="+", default=[], metavar="FILE", help="rewrite the marked tables of FILE")
    args = parser.parse_args(argv)
    if args.command:
        sys.stdout.write(table(args.command))
    for name in args.write:
        path = Path(name)
        text = path.read_text()
        if fill(text) != text:
            path.write_text(fill(text))
            print(f"doc_options: rewrote {', '.join(marked(text))} in {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
