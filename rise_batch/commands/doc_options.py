"""The docs' option tables, made from the same layouts as the commands' flags (rise_batch/options.py).

A guide marks where a command's table goes, and where a registry's list goes (formats, systems, tool-kinds, views,
retrievers, backends, transports):

    <!-- options: structure -->
    (the generated table)
    <!-- /options -->
    <!-- list: systems -->
    (one line per registered system)
    <!-- /list -->

`python -m rise_batch.commands.doc_options structure` prints a table; `--write FILE...` rewrites every marked table
of those files in place. tests/commands/test_doc_options.py checks that each guide's tables are what this writes, so
a default changed on its config field cannot leave the docs behind.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from rise_batch.commands.eval_retrieval import EVAL_RETRIEVAL_OPTIONS
from rise_batch.commands.judge import JUDGE_OPTIONS
from rise_batch.commands.report import REPORT_OPTIONS
from rise_batch.commands.run import RUN_OPTIONS
from rise_batch.commands.structure import STRUCTURE_OPTIONS
from rise_batch.commands.sweep import SWEEP_OPTIONS
from rise_batch.commands.workspace import BASH_OPTIONS, READ_OPTIONS, SEARCH_OPTIONS
from rise_batch.fake_llm.faults import FAULT_OPTIONS
from rise_batch.fake_llm.serve_options import LIMIT_OPTIONS, SERVE_OPTIONS
from rise_batch.index.build_options import INDEX_OPTIONS
from rise_batch.logs import OUTPUT_OPTIONS
from rise_batch.options import Layout, markdown_table
from rise_batch.structuring.plan_options import PLAN_OPTIONS, PLAN_OUTPUT_OPTIONS

# command -> (its layout, where its keys sit in a config file: None for a command without one)
TABLES: dict[str, tuple[Layout, str | None]] = {
    "structure": (STRUCTURE_OPTIONS, ""),
    "run": (RUN_OPTIONS, ""),
    "judge": (JUDGE_OPTIONS, "judge."),  # a sweep's judge: section
    "sweep": (SWEEP_OPTIONS, None),
    "output": (OUTPUT_OPTIONS, None),  # every command's --log-level and --progress-every
    "plan": (PLAN_OPTIONS._replace(sections=PLAN_OPTIONS.sections + PLAN_OUTPUT_OPTIONS.sections), None),
    "index": (INDEX_OPTIONS, None),
    "eval-retrieval": (EVAL_RETRIEVAL_OPTIONS, None),
    "workspace-search": (SEARCH_OPTIONS, None),
    "workspace-bash": (BASH_OPTIONS, None),
    "workspace-read": (READ_OPTIONS, None),
    "report": (REPORT_OPTIONS, None),
    "fake-llm": (SERVE_OPTIONS._replace(sections=SERVE_OPTIONS.sections + LIMIT_OPTIONS.sections), None),
    "fake-llm-faults": (FAULT_OPTIONS, ""),  # the keys POST /v1/_config takes
}
_BLOCK = re.compile(r"(<!-- options: ([\w-]+) -->\n)(.*?)(<!-- /options -->)", re.DOTALL)
_LIST = re.compile(r"(<!-- list: ([\w-]+) -->\n)(.*?)(<!-- /list -->)", re.DOTALL)


def _registry_list(kind: str) -> str:
    """One registry as the guides list it, an entry a line: `- `name`: help`."""
    if kind == "formats":
        from rise_batch.corpus.readers import FORMATS

        return "".join(f"- {f.label}: `{'`, `'.join(f.suffixes)}`\n" for f in FORMATS.values())
    if kind == "systems":
        from rise_batch.agent.systems import SYSTEMS

        return "".join(
            f"- `{s.name}` ({s.label}): {s.help}; tools: {s.tools}; view: {s.docs}\n" for s in SYSTEMS.values()
        )
    if kind == "views":
        from rise_batch.agent.systems import SYSTEMS
        from rise_batch.agent.views import VIEWS, View

        def used_by(view: str) -> str:
            return ", ".join(f"`{s.name}`" for s in SYSTEMS.values() if s.docs == view) or "no system yet"

        def assumes(v: View) -> str:
            said = [("a TOC at the top", v.toc), ("sections under `## ` headings", v.headings)]
            said.append((f"its line numbers are lines of the {v.lines_of} files, which `read` opens", bool(v.lines_of)))
            return ", ".join(text for text, holds in said if holds) or "no TOC"

        return "".join(
            f"- `{v.name}`: {v.help}; tools may assume: {assumes(v)}; used by {used_by(v.name)}\n"
            for v in VIEWS.values()
        )
    if kind == "tool-kinds":
        from rise_batch.agent.systems import TOOL_KINDS

        return "".join(f"- `{t.name}`: {t.help}\n" for t in TOOL_KINDS.values())
    if kind == "retrievers":
        from rise_batch.index.retriever_kinds import RETRIEVERS

        return "".join(f"- `{r.name}` (index parts: {', '.join(r.parts)}): {r.help}\n" for r in RETRIEVERS.values())
    from rise_batch.registry import BACKENDS, TRANSPORTS

    table = {"backends": BACKENDS, "transports": TRANSPORTS}.get(kind)
    if table is None:
        raise SystemExit(f"doc_options: no registry list {kind!r}; known: {', '.join(LISTS)}")
    return "".join(f"- `{e.name}`: {e.help}\n" for e in table.values())


LISTS = (
    "formats",
    "systems",
    "tool-kinds",
    "views",
    "retrievers",
    "backends",
    "transports",
)  # what <!-- list: X --> may name


def table(command: str) -> str:
    if command not in TABLES:
        raise SystemExit(f"doc_options: no option table for {command!r}; known: {', '.join(TABLES)}")
    layout, prefix = TABLES[command]
    return markdown_table(layout, prefix)


def fill(text: str) -> str:
    """`text` with every marked table and registry list replaced by the generated one."""
    text = _BLOCK.sub(lambda m: m.group(1) + table(m.group(2)) + m.group(4), text)
    return _LIST.sub(lambda m: m.group(1) + _registry_list(m.group(2)) + m.group(4), text)


def marked(text: str) -> list[str]:
    """The commands whose tables `text` marks."""
    return [m.group(2) for m in _BLOCK.finditer(text)]


def marked_lists(text: str) -> list[str]:
    """The registries whose lists `text` marks."""
    return [m.group(2) for m in _LIST.finditer(text)]


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
            print(f"doc_options: rewrote {', '.join(marked(text) + marked_lists(text))} in {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
