"""report.md: the report's blocks (report_rows.py: the paper-style tables of run summaries, the interaction-space
and paired sections, retrieval-only results) as Markdown, then the figures. report.html draws the same blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rise_batch.eval.report_rows import Block


def md_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *("| " + " | ".join(r) + " |" for r in rows)]


def md_block(block: Block) -> list[str]:
    """One block's lines (without the blank line that follows every block)."""
    kind = block[0]
    if kind == "table":
        return md_table(block[1], block[2])
    if kind == "warnings":
        return [f"**Warning:** {w}" for w in block[1]]
    if kind == "runs":
        return [f"{i}. `{run_dir}`{note}" for i, (run_dir, note) in enumerate(block[1], 1)]
    return [{"h2": "## ", "h3": "### ", "p": ""}[kind] + block[1]]


def render_markdown(blocks: Sequence[Block], plots: Sequence[str]) -> str:
    out = ["# RISE evaluation report", ""]
    for block in blocks:
        out += [*md_block(block), ""]
    if plots:
        out += ["## Figures", ""] + [f"![{Path(p).stem}]({Path(p).name})" for p in plots] + [""]
    return "\n".join(out)
