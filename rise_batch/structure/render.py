"""Rendering the structured document (ARCHITECTURE.md, "The rules the code relies on") and undoing it.

The agent navigates by line numbers (`read(path, offset, limit)`, rg output), so the TOC ranges are computed over
the FINAL file, and the original text must survive byte for byte: only whole lines are added (the TOC block after
the frontmatter and one `## ` heading line per section), never an original line edited. Lines are split on "\n"
only, as rg, grep and `read` count them; a CRLF document gets CRLF on the added lines too.

`strip_structure` is the inverse. It trusts nothing it cannot check: it removes heading lines only at the line
numbers the TOC names, and only if the whole block is consistent (ranges contiguous, ending on the last line,
each start line a `## ` heading), so a document whose own text contains "## Table of Contents" or
"=== DOCUMENT BODY ===" is left alone when it was not rendered, and restored correctly when it was.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

from rise_batch.structure.anchors import body_start_line
from rise_batch.structure.naming import describe
from rise_batch.types import Section

TOC_HEADER = "## Table of Contents"
BODY_MARKER = "=== DOCUMENT BODY ==="
RANGE_DASH = "\u2013"  # en dash between line numbers
DESC_DASH = "\u2014"  # em dash before the description
MAX_TITLE_CHARS = 120
MAX_DESC_CHARS = 400

_ENTRY = re.compile(r"- L(\d+)\u2013(\d+): ")
# Everything str.splitlines() treats as a line break, plus other whitespace: none may survive inside one line.
_LINE_BREAKING = re.compile(r"[\s\u2028\u2029\x1c-\x1f\x85]+")


def one_line(s: str, max_chars: int) -> str:
    """Collapse a title/description to one trimmed line, cut at a word boundary to `max_chars`."""
    if not s.isprintable() or "  " in s:  # fast path: printable text has no line or paragraph separators
        s = _LINE_BREAKING.sub(" ", s)
    s = s.strip()
    if len(s) <= max_chars:
        return s
    cut = s[:max_chars].rsplit(" ", 1)[0]
    return (cut or s[:max_chars]).rstrip()


def clean_title(title: str, index: int) -> str:
    return one_line(title, MAX_TITLE_CHARS) or f"Section {index + 1}"


def clean_description(description: str) -> str:
    return one_line(description, MAX_DESC_CHARS)


def _line_count(text: str) -> int:
    """Lines as an editor or `wc -l` (+1 for an unterminated last line) counts them."""
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def _eol_suffix(text: str) -> str:
    first = text.find("\n")
    return "\r" if first > 0 and text[first - 1] == "\r" else ""


def _fallback_description(sections: Sequence[Section], i: int, lines: list[str], n_real: int, title: str) -> str:
    """A description taken from the section's own lines, for a proposal that gave none (an LLM's empty string).

    Every TOC line keeps the promised `- L<a>–<b>: <title> — <description>` shape, which readers parse; the title
    stands in only for a section whose lines hold no words at all.
    """
    stop = sections[i + 1].line if i + 1 < len(sections) else n_real
    return clean_description(describe([list(range(sections[i].line, stop))], lines)) or title


def render(text: str, sections: Sequence[Section]) -> str:
    """Insert the TOC block and the section headings; zero sections returns `text` unchanged.

    Section lines are 0-indexed lines of `text`, strictly increasing, inside the body; anything else is a bug in
    the caller (validation guarantees it), so it raises ValueError rather than rendering a wrong document.
    """
    if not sections:
        return text
    lines = text.split("\n")
    body = body_start_line(text)
    n_real = _line_count(text)
    prev = body - 1
    for s in sections:
        if not (prev < s.line < n_real):
            raise ValueError(f"section line {s.line} out of order or outside the body [{body}, {n_real})")
        prev = s.line
    eol = _eol_suffix(text)
    n = len(sections)
    # 1-indexed final line of heading i: its original line + 1, shifted by the TOC block and i earlier headings.
    starts = [s.line + 1 + (n + 2) + i for i, s in enumerate(sections)]
    total = n_real + 2 + 2 * n
    titles = [clean_title(s.title, i) for i, s in enumerate(sections)]
    out = lines[:body]
    out.append(TOC_HEADER + eol)
    for i, s in enumerate(sections):
        end = starts[i + 1] - 1 if i + 1 < n else total
        desc = clean_description(s.description) or _fallback_description(sections, i, lines, n_real, titles[i])
        out.append(f"- L{starts[i]}{RANGE_DASH}{end}: {titles[i]} {DESC_DASH} {desc}{eol}")
    out.append(BODY_MARKER + eol)
    pos = body
    for i, s in enumerate(sections):
        out.extend(lines[pos : s.line])
        out.append(f"## {titles[i]}{eol}")
        pos = s.line
    out.extend(lines[pos:])
    return "\n".join(out)


class TocEntry(NamedTuple):
    """One `- L<start>–<end>: <title> — <description>` line: 1-indexed, inclusive lines of the final file."""

    start: int
    end: int
    title: str
    description: str


class Toc(NamedTuple):
    """A rendered document's TOC block, checked: `lines` is the file split on "\n", `body` the index of the
    `## Table of Contents` line, `marker` the index of the `=== DOCUMENT BODY ===` line."""

    entries: list[TocEntry]
    lines: list[str]
    body: int
    marker: int


def parse_toc(rendered: str) -> Toc | None:
    """The TOC block of a rendered document, or None when it carries no consistent one.

    The one parser of TOC lines: `strip_structure` and the snippet search both read them here. Consistent means
    what `render` writes: ranges contiguous, ending on the last line, each start line a `## ` heading, so a
    document whose own text holds a TOC-like block is not mistaken for a rendered one. The title is the heading
    line's (exact, even when it holds an em dash); the description is what follows it on the entry line.
    """
    lines = rendered.split("\n")
    body = body_start_line(rendered)
    if body >= len(lines) or lines[body].rstrip("\r") != TOC_HEADER:
        return None
    found: list[tuple[int, int, str]] = []
    i = body + 1
    while i < len(lines):
        m = _ENTRY.match(lines[i])
        if not m:
            break
        found.append((int(m.group(1)), int(m.group(2)), lines[i][m.end() :].rstrip("\r")))
        i += 1
    if not found or i >= len(lines) or lines[i].rstrip("\r") != BODY_MARKER:
        return None
    marker = i
    total = _line_count(rendered)
    entries: list[TocEntry] = []
    for k, (start, end, rest) in enumerate(found):
        expected_end = found[k + 1][0] - 1 if k + 1 < len(found) else total
        idx = start - 1
        if end != expected_end or start > end or idx <= marker or not lines[idx].startswith("## "):
            return None
        title = lines[idx][3:].rstrip("\r")
        desc = rest[len(title) :].removeprefix(f" {DESC_DASH} ") if rest.startswith(title) else rest
        entries.append(TocEntry(start, end, title, desc))
    return Toc(entries, lines, body, marker)


def strip_structure(rendered: str) -> str:
    """Give back the original text of a rendered document (the input itself when it carries no valid TOC)."""
    toc = parse_toc(rendered)
    if toc is None:
        return rendered
    heading_idx = {e.start - 1 for e in toc.entries}
    lines = toc.lines
    kept = lines[: toc.body] + [
        ln for j, ln in enumerate(lines[toc.marker + 1 :], toc.marker + 1) if j not in heading_idx
    ]
    return "\n".join(kept)
