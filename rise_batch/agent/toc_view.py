"""The TOC-only view: each document's file holds its table of contents alone, every entry a line range of the
structured file.

A RISE agent over these files greps summaries, not bodies: its workspace holds one short file per retrieved
document (the frontmatter and the TOC block the structure job rendered), and its `read` opens the structured file
at the same relpath (agent/views.py: the view's `lines_of`), so an entry `- L41–97: Career — ...` is read as lines
41-97 of the structured document. The entries are the structured file's own, copied byte for byte, so their ranges
are exactly the ones `render` wrote: each starts on the section's `## ` heading line.

A document the structure job gave no TOC (too short, or its proposal unusable) gets one entry, its whole body:
`- L<first body line>–<last line>: <title> — the whole document (no sections)`. Whether a document has a TOC is read
from its checkpoint row, never guessed from the text (a page may quote a TOC-like block); a row that says a TOC was
inserted over a file without a consistent one stops the build, naming the file.
"""

from __future__ import annotations

import os
from pathlib import Path

from rise_batch.agent.view_files import build_files, checkpoint_outcomes
from rise_batch.corpus.docmap import frontmatter_title
from rise_batch.space.safe_open import read_from
from rise_batch.structure.anchors import body_start_line
from rise_batch.structure.render import DESC_DASH, MAX_TITLE_CHARS, RANGE_DASH, TOC_HEADER, one_line, parse_toc

WHOLE = "the whole document (no sections)"


class TocMismatch(ValueError):
    """A structured file whose checkpoint row says a TOC was inserted, but which holds no consistent one."""


def toc_only(text: str, has_toc: bool, relpath: str) -> str:
    """The TOC-only file of one structured document (`has_toc`: its checkpoint row says a TOC was inserted)."""
    if has_toc:
        toc = parse_toc(text)
        if toc is None:
            raise TocMismatch(f"{relpath}: its checkpoint row says a TOC was inserted, the file has none")
        return "\n".join(toc.lines[: toc.marker]) + "\n"  # frontmatter + `## Table of Contents` + its entries
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    body = body_start_line(text)
    head = "".join(f"{line}\n" for line in lines[:body])
    if body >= len(lines):  # nothing below the frontmatter: a TOC without entries
        return f"{head}{TOC_HEADER}\n"
    title = one_line(frontmatter_title(text) or relpath, MAX_TITLE_CHARS)
    return f"{head}{TOC_HEADER}\n- L{body + 1}{RANGE_DASH}{len(lines)}: {title} {DESC_DASH} {WHOLE}\n"


def build_toc(docs: Path, tmp: Path, workers: int) -> None:
    """The view's builder: TMP/corpus/<relpath>, the TOC-only file of every structured file."""
    build_files(docs, tmp, workers, checkpoint_outcomes(docs), _write_toc)


def _write_toc(fd: int, st: os.stat_result, src: str, dst: str, rel: str, docid: str, row: tuple | None) -> None:
    if row is None:
        raise TocMismatch(
            f"{src}/{rel} (docid {docid!r}): no checkpoint row says whether it holds a TOC; remove the file or "
            "finish the run with the same `rise-batch structure` command"
        )
    text = read_from(fd, st).decode("utf-8", errors="replace")
    try:
        out = toc_only(text, row[0], rel)
    except TocMismatch as e:
        remedy = f"re-create the structured files with `rise-batch materialize {os.path.dirname(src)}`, then re-run"
        raise TocMismatch(f"{src}/{e} (docid {docid!r}); {remedy}") from None
    os.makedirs(os.path.dirname(f"{dst}/{rel}"), exist_ok=True)
    with open(f"{dst}/{rel}", "w", encoding="utf-8", newline="") as f:
        f.write(out)
