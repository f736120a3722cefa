"""Anchor validation: where does each proposed section really start?

A proposer (LLM or heuristic) names each section start by a short verbatim phrase. Nothing about it is trusted: the
phrase may be paraphrased, re-spaced, cut, repeated elsewhere, or out of order. This module turns phrases into line
numbers of the original text by the rules in ARCHITECTURE.md ("The rules the code relies on": anchor validation),
deterministically, so a re-run of the same proposal always yields the same document.

Tiers, first hit wins: exact substring of the body -> whitespace-normalised match -> 12/10/8/6-word prefixes of
the normalised anchor. Only the body is searched (a leading YAML frontmatter block is skipped). The first tier
with any match decides the anchor: among its matches that land strictly after the previously accepted anchor's
line, a match at a paragraph start wins (line start after a blank line > line start > mid-line), then the one
closest to the expected position, which is "just after the previous accepted anchor", i.e. the earliest. When the
tier has matches but none after the previous anchor, the anchor is dropped as `duplicate` (it resolves to a line
some accepted anchor already holds) or `out-of-order`; with no match in any tier it is `not-found`.

Speed matters (1M documents): every search is `str.find` (C speed), starting at the previous accepted anchor's
line; the text before it is searched only when nothing valid lies after it. A whitespace-normalised match is found
on the original text, without building a normalised copy: the anchor's longest word is located with `str.find`
and its neighbours are checked across whitespace runs around it (a regex sub of a 15 kB document, or compiling a
regex per anchor, each cost more than validating all of its anchors this way).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rise_batch.types import AnchorOutcome

PREFIX_WORDS = (12, 10, 8, 6)
LOCATED = ("exact", "normalized", "prefix")
MAX_MATCHES = 256  # per tier; a phrase repeated more often than this is not a useful anchor anyway
FRONTMATTER_MAX_LINES = 200

_WS_RUN = re.compile(r"\s+")


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
    """Collapse every whitespace run to one space and trim: the 'whitespace-normalised' form of anchor validation."""
    return _WS_RUN.sub(" ", s).strip()


def _ws_forward(text: str, pos: int) -> int:
    """Position after the whitespace run starting at `pos`, or -1 when `pos` is not whitespace."""
    end = pos
    while True:
        seg = text[end : end + 64]
        n = len(seg) - len(seg.lstrip())
        end += n
        if n < 64:
            return end if end > pos else -1


def _ws_backward(text: str, pos: int) -> int:
    """Start of the whitespace run ending just before `pos`, or -1 when text[pos - 1] is not whitespace."""
    start = pos
    while True:
        seg = text[max(0, start - 64) : start]
        n = len(seg) - len(seg.rstrip())
        start -= n
        if n < len(seg) or start == 0:
            return start if start < pos else -1


def _match_around(text: str, words: Sequence[str], k: int, at: int) -> int:
    """Start of `words` matched with word k at `at` (whitespace runs between words), or -1."""
    pos = at + len(words[k])
    for w in words[k + 1 :]:
        pos = _ws_forward(text, pos)
        if pos < 0 or not text.startswith(w, pos):
            return -1
        pos += len(w)
    pos = at
    for w in reversed(words[:k]):
        pos = _ws_backward(text, pos)
        if pos < 0 or not text.endswith(w, 0, pos):
            return -1
        pos -= len(w)
    return pos


def _find_words(text: str, words: Sequence[str], start: int, end: int | None = None) -> list[int]:
    """Starts in [start, end) of `w1 <whitespace run> w2 ...` in the original text: the whitespace-normalised
    match, found without building a normalised copy of the document. The longest word is located with str.find
    and the others are checked around it: a C-speed scan plus a few comparisons per candidate."""
    k = max(range(len(words)), key=lambda i: len(words[i]))
    offset = sum(len(w) + 1 for w in words[:k])  # the key word lies at least this far after the match start
    out: list[int] = []
    at = text.find(words[k], start + offset)
    while at >= 0 and len(out) < MAX_MATCHES:
        m = _match_around(text, words, k, at)
        if m >= start and (end is None or m < end):
            out.append(m)
        at = text.find(words[k], at + 1)
    return sorted(set(out))


def _find_all(hay: str, needle: str, start: int, end: int | None = None) -> list[int]:
    """Starts in [start, end) of `needle` (overlapping occurrences included)."""
    stop = len(hay) if end is None else min(len(hay), end + len(needle) - 1)
    out: list[int] = []
    pos = hay.find(needle, start, stop)
    while pos >= 0 and len(out) < MAX_MATCHES:
        out.append(pos)
        pos = hay.find(needle, pos + 1, stop)
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


def _tiers(text: str, anchor: str):
    """Yield (status, prefix_words, search) tier by tier; search(start, end) -> ascending match starts."""
    stripped = anchor.strip()
    if not stripped:
        return
    yield "exact", 0, lambda start, end=None: _find_all(text, stripped, start, end)
    words = stripped.split()
    yield "normalized", 0, lambda start, end=None: _find_words(text, words, start, end)
    for n in PREFIX_WORDS:
        if len(words) > n:
            yield "prefix", n, lambda start, end=None, n=n: _find_words(text, words[:n], start, end)


def _lines(text: str, positions: list[int], char: int, line: int) -> list[int]:
    """Line of each ascending position >= char, counting newlines incrementally from (char, line)."""
    out: list[int] = []
    for p in positions:
        line += text.count("\n", char, p)
        char = p
        out.append(line)
    return out


def validate_anchors(text: str, anchors: Sequence[str]) -> list[AnchorOutcome]:
    """Locate each anchor in `text` (see module docstring); one AnchorOutcome per anchor, in proposal order.

    Each tier is searched from the start of the previous accepted anchor's line (valid matches can only lie
    there or later); the text before it is searched only when that finds nothing valid, to tell `duplicate` from
    `out-of-order` from trying the next tier.
    """
    body_line, body_char = body_start(text)
    accepted_lines: set[int] = set()
    prev_line, base_char, base_line = body_line - 1, body_char, body_line
    out: list[AnchorOutcome] = []
    for i, anchor in enumerate(anchors):
        outcome = AnchorOutcome(i, "not-found")
        for status, n_words, search in _tiers(text, anchor):
            after = search(base_char)
            lines = _lines(text, after, base_char, base_line)
            valid = [(p, ln) for p, ln in zip(after, lines, strict=True) if ln > prev_line]
            if not valid:
                before = search(body_char, base_char)
                if not before and not after:
                    continue
                lines += _lines(text, before, body_char, body_line)
                taken = any(ln in accepted_lines for ln in lines)
                outcome = AnchorOutcome(i, "duplicate" if taken else "out-of-order")
                break
            if len(valid) > 1:
                best = max(valid, key=lambda c: (_paragraph_rank(text, c[0], c[1], body_line), -c[0]))
            else:
                best = valid[0]
            outcome = AnchorOutcome(i, status, best[1], best[0], n_words)
            prev_line = best[1]
            base_char, base_line = text.rfind("\n", 0, best[0]) + 1, best[1]
            accepted_lines.add(best[1])
            break
        out.append(outcome)
    return out
