"""Anchor validation: where does each proposed section really start?

A proposer (LLM or heuristic) names each section start by a short verbatim phrase. Nothing about it is trusted:
the phrase may be paraphrased, re-spaced, cut, repeated elsewhere, or out of order. This module turns phrases into
line numbers of the original text by the rules in DESIGN.md ("Anchor validation"), deterministically, so a re-run
of the same proposal always yields the same document.

Tiers, first hit wins: exact substring of the body -> whitespace-normalised match -> 12/10/8/6-word prefixes of
the normalised anchor. Only the body is searched (a leading YAML frontmatter block is skipped). The first tier
with any match decides the anchor: among its matches that land strictly after the previously accepted anchor's
line, a match at a paragraph start wins (line start after a blank line > line start > mid-line), then the one
closest to the expected position, which is "just after the previous accepted anchor", i.e. the earliest. When the
tier has matches but none after the previous anchor, the anchor is dropped as `duplicate` (it resolves to a line
some accepted anchor already holds) or `out-of-order`; with no match in any tier it is `not-found`.

Speed matters (1M documents): exact search is `str.find`; the whitespace-normalised text and its position map are
built once per document, only when some anchor needs them, and the map stores one entry per *collapsed* whitespace
run (not per character), so building it costs one C-level regex pass.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence

from rise_batch.types import AnchorOutcome

PREFIX_WORDS = (12, 10, 8, 6)
LOCATED = ("exact", "normalized", "prefix")
DROPPED = ("not-found", "out-of-order", "duplicate")
MAX_MATCHES = 256  # per tier; a phrase repeated more often than this is not a useful anchor anyway
FRONTMATTER_MAX_LINES = 200

_WS_RUN = re.compile(r"\s+")
_WS_MULTI = re.compile(r"\s{2,}")


def body_start(text: str) -> tuple[int, int]:
    """(line, char offset) where the body starts: after a leading `---` ... `---` frontmatter block, else (0, 0).

    A document that opens with `---` but never closes it within FRONTMATTER_MAX_LINES lines has no frontmatter
    (a Markdown horizontal rule must not swallow the document).
    """
    if not text.startswith("---"):
        return 0, 0
    end = text.find("\n")
    if end < 0 or text[:end].rstrip("\r") != "---":
        return 0, 0
    line, pos = 1, end + 1
    while line < FRONTMATTER_MAX_LINES and pos <= len(text):
        nxt = text.find("\n", pos)
        cur = text[pos:] if nxt < 0 else text[pos:nxt]
        if cur.rstrip("\r") == "---":
            return (line + 1, len(text)) if nxt < 0 else (line + 1, nxt + 1)
        if nxt < 0:
            break
        line, pos = line + 1, nxt + 1
    return 0, 0


def body_start_line(text: str) -> int:
    """0-indexed line where the body starts (first line after the frontmatter block, 0 without one)."""
    return body_start(text)[0]


def normalize_ws(s: str) -> str:
    """Collapse every whitespace run to one space and trim: the 'whitespace-normalised' form of DESIGN.md."""
    return _WS_RUN.sub(" ", s).strip()


class _Normalized:
    """The body with whitespace runs collapsed, plus a sparse map back to original offsets."""

    __slots__ = ("text", "_starts", "_shifts")

    def __init__(self, text: str, start: int) -> None:
        body = text[start:]
        self.text = _WS_RUN.sub(" ", body)
        starts: list[int] = [0]
        shifts: list[int] = [start]
        cum = 0
        for m in _WS_MULTI.finditer(body):
            s, e = m.span()
            # The run becomes one char at s - cum; everything after it is shifted by the chars removed so far.
            starts.append(s - cum + 1)
            cum += e - s - 1
            shifts.append(start + cum)
        self._starts = starts
        self._shifts = shifts

    def to_original(self, pos: int) -> int:
        return pos + self._shifts[bisect_right(self._starts, pos) - 1]


def _find_all(hay: str, needle: str, start: int) -> list[int]:
    out: list[int] = []
    pos = hay.find(needle, start)
    while pos >= 0 and len(out) < MAX_MATCHES:
        out.append(pos)
        pos = hay.find(needle, pos + 1)
    return out


def _paragraph_rank(text: str, pos: int, line: int, first_body_line: int) -> int:
    """2: starts a line after a blank line (or the body); 1: starts a line; 0: mid-line."""
    ls = text.rfind("\n", 0, pos) + 1
    if text[ls:pos].strip():
        return 0
    if line <= first_body_line:
        return 2
    prev_ls = text.rfind("\n", 0, ls - 1) + 1
    return 2 if not text[prev_ls : ls - 1].strip() else 1


def _tiers(text: str, anchor: str, body_char: int, norm_cache: list[_Normalized]):
    """Yield (status, prefix_words, original match starts) tier by tier, building the normalised text lazily."""
    stripped = anchor.strip()
    if not stripped:
        return
    yield "exact", 0, _find_all(text, stripped, body_char)
    if not norm_cache:
        norm_cache.append(_Normalized(text, body_char))
    norm = norm_cache[0]
    na = normalize_ws(stripped)
    yield "normalized", 0, [norm.to_original(p) for p in _find_all(norm.text, na, 0)]
    words = na.split(" ")
    for n in PREFIX_WORDS:
        if len(words) > n:
            prefix = " ".join(words[:n])
            yield "prefix", n, [norm.to_original(p) for p in _find_all(norm.text, prefix, 0)]


def validate_anchors(text: str, anchors: Sequence[str]) -> list[AnchorOutcome]:
    """Locate each anchor in `text` (see module docstring); one AnchorOutcome per anchor, in proposal order."""
    body_line, body_char = body_start(text)
    norm_cache: list[_Normalized] = []
    accepted_lines: set[int] = set()
    prev_line = body_line - 1
    out: list[AnchorOutcome] = []
    for i, anchor in enumerate(anchors):
        outcome = AnchorOutcome(i, "not-found")
        for status, n_words, matches in _tiers(text, anchor, body_char, norm_cache):
            if not matches:
                continue
            lines = [text.count("\n", 0, p) for p in matches]
            valid = [(p, ln) for p, ln in zip(matches, lines, strict=True) if ln > prev_line]
            if not valid:
                kind = "duplicate" if any(ln in accepted_lines for ln in lines) else "out-of-order"
                outcome = AnchorOutcome(i, kind)
                break
            if len(valid) > 1:
                best = max(valid, key=lambda c: (_paragraph_rank(text, c[0], c[1], body_line), -c[0]))
            else:
                best = valid[0]
            outcome = AnchorOutcome(i, status, best[1], best[0], n_words)
            prev_line = best[1]
            accepted_lines.add(best[1])
            break
        out.append(outcome)
    return out
