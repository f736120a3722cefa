"""report.md: the report's blocks (report_rows.py: the paper-style tables of run summaries, the interaction-space
and paired sections, retrieval-only results) as Markdown, then the figures. report.html draws the same blocks.

Every text a block carries goes through `md_text` (or `md_code`): system and model names, tool names, stop
reasons, labels and run directories come from run files, which come from anywhere. Escaped, such a value is shown
as written and cannot end its table cell or line, start a heading, or become an image, a link or raw HTML that a
Markdown viewer would fetch or run.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from rise_batch.eval.report_rows import Block

# Line and paragraph breaks (any a Markdown viewer may honour) and other control characters: one space each.
_BREAKS = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")
# Markdown's inline syntax: code, emphasis, strike-through, raw HTML and autolinks, entities, table cells, images.
_INLINE = re.compile(r"([\\`*~<>&|!])")
_LINK = re.compile(r"\](?=[(\[])")  # `](url)` and `][ref]`: a bracketed text followed by a target is a link


def md_text(value: object, line_start: bool = False) -> str:
    """`value` as Markdown text that renders as written, on one line, inside a table cell or (`line_start`: where
    a line begins, so a leading `#`, `-`, `1.`... would start a heading, a list or a quote) a paragraph."""
    text = _LINK.sub(r"\\]", _INLINE.sub(r"\\\1", _BREAKS.sub(" ", str(value))))
    if line_start and text.startswith(("#", "-", "+", "=")):
        return "\\" + text
    return re.sub(r"^(\d+)([.)])", r"\1\\\2", text) if line_start else text  # `1.` would start a list


def md_code(value: object) -> str:
    """`value` as a Markdown code span on one line: fenced by more backticks than any run inside it (CommonMark's
    rule, as backslashes do not escape inside code)."""
    text = _BREAKS.sub(" ", str(value))
    fence = "`" * (max((len(r) for r in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(md_text(c) for c in cells) + " |"

    return [line(head), "|" + "---|" * len(head), *(line(r) for r in rows)]


def md_block(block: Block) -> list[str]:
    """One block's lines (without the blank line that follows every block)."""
    kind = block[0]
    if kind == "table":
        return md_table(block[1], block[2])
    if kind == "warnings":
        return [f"**Warning:** {md_text(w)}" for w in block[1]]
    if kind == "runs":
        return [f"{i}. {md_code(run_dir)}{md_text(note)}" for i, (run_dir, note) in enumerate(block[1], 1)]
    return [{"h2": "## ", "h3": "### ", "p": ""}[kind] + md_text(block[1], line_start=kind == "p")]


def render_markdown(blocks: Sequence[Block], plots: Sequence[str]) -> str:
    out = ["# RISE evaluation report", ""]
    for block in blocks:
        out += [*md_block(block), ""]
    if plots:
        out += ["## Figures", ""] + [f"![{Path(p).stem}]({Path(p).name})" for p in plots] + [""]
    return "\n".join(out)
