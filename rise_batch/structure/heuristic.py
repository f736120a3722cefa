"""The offline structurer: a table of contents from the document's own layout, free and deterministic.

It is the embedded default and the way a 1M-document corpus gets a TOC without an API key, so it must be fast
(hundreds of documents per second per core) and must never invent text: titles come from the document's heading
lines or phrases of its text, descriptions are cut from one line of it, anchors are verbatim.

Plan: (1) mark heading-like lines (short, no sentence punctuation inside, followed by text; WikiExtractor keeps
section titles as such lines, e.g. "Early life" or "History."); (2) cut the body into blocks at heading runs;
(3) merge blocks below a size floor forward (a parent heading with no text of its own absorbs its first child),
split long runs at paragraph starts (~500-2000 words per section, as the paper asks of the LLM); (4) make sure a
1,500+ character document gets at least two sections when it has two paragraphs to cut between.
Its output is a Proposal like the LLM's, validated and rendered by the same code.

Titles name what a section covers (issue 13): a merged section names every heading it absorbed, shortened to fit
(not only the first, which may be a one-line "Death" before pages of astronomy); text without a heading is named
by its most repeated multi-word phrase ("Gerrard Winstanley"), never a comma list of capitalised words. Every
entry has a description, taken from one prose line of the section's largest part; a section with no prose at all
(tables, reference lists, markup) lists its first entries, so no TOC line ever lacks the promised " — ".
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from rise_batch.structure import naming
from rise_batch.structure.anchors import body_start
from rise_batch.types import Proposal, SectionProposal

MIN_BODY_CHARS = 400  # below this (or below two non-blank lines) a document is "too-short"
TWO_SECTION_CHARS = 1500  # documents this long get >= 2 sections whenever they have two paragraphs
MAX_WORDS = 2000  # a section longer than this is split at paragraph starts ...
TARGET_WORDS = 1000  # ... into pieces of about this size
MIN_WORDS_FLOOR, MIN_WORDS_CEIL = 60, 400  # a section below max(floor, min(ceil, words/8)) absorbs the next block
HEADING_MAX_WORDS, HEADING_MAX_CHARS = 10, 90
MAX_HEADING_RUN = 3
TITLE_MAX_WORDS = 7  # two headings in a row name one part together when they fit ("History: Ancient China")
ANCHOR_WORDS, ANCHOR_MAX_WORDS = 10, 12

_HEADING_START = re.compile(r"[^\W_]|[\"'(“‘]")
# Markup, URLs, a sentence break inside, trailing punctuation of a lead-in, "Category:x" and two commas (citations
# and reference-list entries are short lines too, but are never headings).
_NOT_HEADING = re.compile(r"[|<>{}\[\]=]|https?:|\.\s|[,;:\-–—]$|!$|:\S|,.*,|\bISBN\b")
_WORD_SPAN = re.compile(r"\S+")


@dataclass
class _Block:
    start: int  # 0-indexed line of the original text where the section starts
    headings: list[str] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)  # content (non-heading, non-blank) lines
    words: int = 0
    # (first content line, heading label or "" for headless text) of every block merged into this one; a piece
    # split from a block shares its list, so a piece that starts mid-part knows which heading it continues.
    parts: list[tuple[int, str]] = field(default_factory=list)


def _is_heading_like(s: str) -> bool:
    """A line that reads as a section title rather than prose (caller checks that text follows it)."""
    s = s.strip()
    if not s or len(s) > HEADING_MAX_CHARS or not _HEADING_START.match(s) or _NOT_HEADING.search(s):
        return False
    n = s.count(" ") + 1
    if n > HEADING_MAX_WORDS:
        return False
    if s.endswith("."):
        return n <= 8 and s.count(".") == 1
    return True


def is_too_short(text: str) -> bool:
    """Too little body to be worth a TOC: under MIN_BODY_CHARS, or fewer than two non-blank lines."""
    body = text[body_start(text)[1] :].strip()
    # After strip() the first and last lines are non-blank, so any newline left means two non-blank lines.
    return len(body) < MIN_BODY_CHARS or "\n" not in body


def _heading_text(s: str) -> str:
    s = s.strip()
    return s[:-1].rstrip() if s.endswith(".") else s


def _blocks(lines: list[str], body: int) -> list[_Block]:
    """Cut the body at heading runs; a run of consecutive headings starts one block."""
    nonblank = [i for i in range(body, len(lines)) if lines[i].strip()]
    lengths = [len(lines[i].strip()) for i in nonblank]
    like = [n <= HEADING_MAX_CHARS and _is_heading_like(lines[i]) for i, n in zip(nonblank, lengths, strict=True)]
    # More than MAX_HEADING_RUN short lines in a row are a list (names, taxa, credits), not nested headings.
    k = 0
    while k < len(like):
        j = k
        while j < len(like) and like[j]:
            j += 1
        if j - k > MAX_HEADING_RUN:
            like[k:j] = [False] * (j - k)
        k = j + 1
    blocks: list[_Block] = []
    cur: _Block | None = None
    prev_heading = False
    last = len(nonblank) - 1
    for k, i in enumerate(nonblank):
        if like[k] and k < last and (lengths[k + 1] > lengths[k] or like[k + 1]):
            if prev_heading and cur is not None:
                cur.headings.append(_heading_text(lines[i]))
            else:
                cur = _Block(i, [_heading_text(lines[i])])
                blocks.append(cur)
            prev_heading = True
            continue
        prev_heading = False
        if cur is None:
            cur = _Block(i)
            blocks.append(cur)
        cur.lines.append(i)
        cur.words += lines[i].count(" ") + 1
    return blocks


def _label(headings: list[str]) -> str:
    """A heading run's name: its first heading, with the second when both fit ("History: Ancient China")."""
    if not headings:
        return ""
    head = headings[0]
    if len(headings) > 1 and len(f"{head} {headings[1]}".split()) <= TITLE_MAX_WORDS:
        head = f"{head}: {headings[1]}"
    return head


def _absorb(cur: _Block, b: _Block) -> None:
    cur.parts.extend(b.parts)
    cur.lines.extend(b.lines)
    cur.words += b.words


def _merge(blocks: list[_Block], min_words: int) -> list[_Block]:
    """A section below `min_words` absorbs the next block; a small last section joins the one before."""
    out: list[_Block] = []
    for b in blocks:
        b.parts = [(b.lines[0], _label(b.headings))]
        if out and out[-1].words < min_words:
            _absorb(out[-1], b)
        else:
            out.append(b)
    if len(out) > 1 and out[-1].words < min_words // 2:
        last = out.pop()
        _absorb(out[-1], last)
    return out


def _split(b: _Block, lines: list[str], pieces: int) -> list[_Block]:
    """Split a block into about `pieces` parts at content lines, cutting where the running word count crosses."""
    cuts = [i for i in b.lines[1:] if _HEADING_START.match(lines[i].lstrip())]
    if not cuts or pieces < 2:
        return [b]
    counts = {i: lines[i].count(" ") + 1 for i in b.lines}
    out = [_Block(b.start, b.headings, parts=b.parts)]
    per = b.words / pieces
    cutset = set(cuts)
    for i in b.lines:
        cur = out[-1]
        if i in cutset and cur.words >= per * 0.6 and len(out) < pieces and b.words - _sum(out) >= per * 0.4:
            cur = _Block(i, parts=b.parts)
            out.append(cur)
        cur.lines.append(i)
        cur.words += counts[i]
    return out


def _sum(blocks: list[_Block]) -> int:
    return sum(x.words for x in blocks)


def _segments(sec: _Block) -> list[tuple[str, bool, list[int]]]:
    """The merged parts a section holds: (heading label or "", starts in this section, its content lines)."""
    first = sec.lines[0]
    label = ""
    for line, lab in sec.parts:  # the part the section's first line belongs to
        if line > first:
            break
        label = lab
    starts = dict(sec.parts)
    segs: list[tuple[str, bool, list[int]]] = [(label, first in starts, [])]
    for i in sec.lines:
        if i in starts and segs[-1][2]:
            segs.append((starts[i], True, []))
        segs[-1][2].append(i)
    return segs


def _title(segs: list[tuple[str, bool, list[int]]], lines: list[str], body: str, lead: str) -> str:
    """Every heading the section holds; a phrase of the text for a part without one (see naming.py).

    `lead` is the document's title for its first section (named after it when the text says it), else "".
    """
    names = []
    for label, starts, idx in segs:
        if naming.is_name(label) and (starts or len(segs) > 1):
            names.append(label)  # the document's own words, whole (a heading line has at most HEADING_MAX_WORDS)
            continue
        if label and len(segs) > 1:
            continue  # a fragment taken for a heading ("and to test") is no name; the other parts name the section
        text = "\n".join(lines[i] for i in idx)
        if lead and not label and lead.lower() in text[: naming.PHRASE_SCAN_CHARS].lower():
            names.append(lead)
            continue
        skip = frozenset(w.lower().strip(",.:;()") for w in label.split())
        name = naming.phrase(text, body, skip, distinct=not lead or bool(label))
        if naming.is_name(label):  # a piece split from a long part: "History: Gerrard Winstanley"
            head = naming.shorten(label, TITLE_MAX_WORDS - 2)
            names.append(f"{head}: {name}" if name else head)
        else:
            names.append(name or naming.shorten(lines[idx[0]].strip(), 5) or "Section")
    if not names:  # every part's heading was a fragment
        text = "\n".join(lines[i] for _, _, idx in segs for i in idx)
        names.append(naming.phrase(text, body) or naming.shorten(lines[segs[0][2][0]].strip(), 5) or "Section")
    return naming.join_names(names)


def _anchor(text: str, start: int, prev_start: int) -> str:
    """Verbatim words from the section's first line on (spanning lines if it is short), unique after prev."""
    ms = [m for _, m in zip(range(ANCHOR_MAX_WORDS), _WORD_SPAN.finditer(text, start), strict=False)]
    begin = ms[0].start()
    anchor = text[begin : ms[min(ANCHOR_WORDS, len(ms)) - 1].end()]
    if len(ms) > ANCHOR_WORDS and text.find(anchor, prev_start + 1) < begin:
        anchor = text[begin : ms[-1].end()]
    return anchor


def propose_heuristic(text: str) -> Proposal:
    """Sections from layout; no sections at all for a too-short document."""
    if is_too_short(text):
        return Proposal(())
    body, _ = body_start(text)
    lines = text.split("\n")
    blocks = [b for b in _blocks(lines, body) if b.lines]
    if not blocks:
        return Proposal(())
    total = sum(b.words for b in blocks)
    min_words = max(MIN_WORDS_FLOOR, min(MIN_WORDS_CEIL, total // 8))
    sections: list[_Block] = []
    for b in _merge(blocks, min_words):
        sections.extend(_split(b, lines, math.ceil(b.words / TARGET_WORDS)) if b.words > MAX_WORDS else [b])
    if len(sections) == 1 and len(text) >= TWO_SECTION_CHARS:
        sections = _split(sections[0], lines, max(2, math.ceil(sections[0].words / TARGET_WORDS)))
    offsets = [0]
    for ln in lines:
        offsets.append(offsets[-1] + len(ln) + 1)
    body_text = text[offsets[body] :]
    lead = naming.doc_title(lines[:body])
    out: list[SectionProposal] = []
    prev = offsets[body] - 1
    for k, b in enumerate(sections):
        anchor = _anchor(text, offsets[b.start], prev)
        prev = offsets[b.start]
        segs = _segments(b)
        title = _title(segs, lines, body_text, "" if k else lead)
        out.append(SectionProposal(title, naming.describe([idx for _, _, idx in segs], lines), anchor))
    return Proposal(tuple(out))
