"""The offline structurer: a table of contents from the document's own layout, free and deterministic.

It is the embedded default and the way a 1M-document corpus gets a TOC without an API key, so it must be fast
(hundreds of documents per second per core) and must never invent text: titles come from the document's heading
lines or its most distinctive terms, descriptions are cut from its first sentences, anchors are verbatim.

Plan: (1) mark heading-like lines (short, no sentence punctuation inside, followed by text; WikiExtractor keeps
section titles as such lines, e.g. "Early life" or "History."); (2) cut the body into blocks at heading runs;
(3) merge blocks below a size floor forward (a parent heading with no text of its own absorbs its first child),
split long runs at paragraph starts (~500-2000 words per section, as the paper asks of the LLM); (4) make sure a
1,500+ character document gets at least two sections when it has two paragraphs to cut between.
Its output is a Proposal like the LLM's, validated and rendered by the same code.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field

from rise_batch.structure.anchors import body_start
from rise_batch.types import Proposal, SectionProposal

MIN_BODY_CHARS = 400  # below this (or below two non-blank lines) a document is "too-short"
TWO_SECTION_CHARS = 1500  # documents this long get >= 2 sections whenever they have two paragraphs
MAX_WORDS = 2000  # a section longer than this is split at paragraph starts ...
TARGET_WORDS = 1000  # ... into pieces of about this size
MIN_WORDS_FLOOR, MIN_WORDS_CEIL = 60, 400  # a section below max(floor, min(ceil, words/8)) absorbs the next block
HEADING_MAX_WORDS, HEADING_MAX_CHARS = 10, 90
MAX_HEADING_RUN = 3
TITLE_MAX_WORDS, DESC_MIN_WORDS, DESC_MAX_WORDS = 7, 10, 25
ANCHOR_WORDS, ANCHOR_MAX_WORDS = 10, 12

_HEADING_START = re.compile(r"[^\W_]|[\"'(“‘]")
# Markup, URLs, a sentence break inside, trailing punctuation of a lead-in, "Category:x" and two commas (citations
# and reference-list entries are short lines too, but are never headings).
_NOT_HEADING = re.compile(r"[|<>{}\[\]=]|https?:|\.\s|[,;:\-–—]$|!$|:\S|,.*,|\bISBN\b")
# Back-matter headings are not worth naming in a description's "Covers ..." list.
_BACK_MATTER = frozenset(
    ("references", "notes", "see also", "external links", "further reading", "bibliography", "sources")
    + ("citations", "footnotes", "notes and references", "works cited")
)
MAX_COVERED = 4
# Title terms are capitalised words (names, places, works) of 4+ letters: a cheap scan, and what makes a title
# distinctive.
_TERM = re.compile(r"[A-ZÀ-ÖØ-ÞĀ-Ž][a-zß-öø-ÿā-ž'’-]{3,}")
_WORD_SPAN = re.compile(r"\S+")
_STOP = frozenset(
    """also although among another because been before being between both could does during each either
    every first from further have having here however into itself just last later many more most much must
    never next only other over same several should since some such than that their them then there these
    they this those through thus under until upon very what when where which while whom whose will with
    within without would your after against along around became become following like made make known
    part since states state called named used using well were about above across""".split()
)


@dataclass
class _Block:
    start: int  # 0-indexed line of the original text where the section starts
    headings: list[str] = field(default_factory=list)
    subheadings: list[str] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)  # content (non-heading, non-blank) lines
    words: int = 0
    parent: str = ""  # heading of the section this piece was split from


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


def _merge(blocks: list[_Block], min_words: int) -> list[_Block]:
    """A section below `min_words` absorbs the next block; a small last section joins the one before."""
    out: list[_Block] = []
    for b in blocks:
        if out and out[-1].words < min_words:
            cur = out[-1]
            cur.subheadings.extend(b.headings[:1])
            cur.lines.extend(b.lines)
            cur.words += b.words
        else:
            out.append(b)
    if len(out) > 1 and out[-1].words < min_words // 2:
        last = out.pop()
        out[-1].subheadings.extend(last.headings[:1])
        out[-1].lines.extend(last.lines)
        out[-1].words += last.words
    return out


def _split(b: _Block, lines: list[str], pieces: int) -> list[_Block]:
    """Split a block into about `pieces` parts at content lines, cutting where the running word count crosses."""
    cuts = [i for i in b.lines[1:] if _HEADING_START.match(lines[i].lstrip())]
    if not cuts or pieces < 2:
        return [b]
    counts = {i: lines[i].count(" ") + 1 for i in b.lines}
    out = [_Block(b.start, b.headings, b.subheadings, parent=b.parent)]
    parent = b.headings[0] if b.headings else b.parent
    per = b.words / pieces
    cutset = set(cuts)
    for i in b.lines:
        cur = out[-1]
        if i in cutset and cur.words >= per * 0.6 and len(out) < pieces and b.words - _sum(out) >= per * 0.4:
            cur = _Block(i, parent=parent)
            out.append(cur)
        cur.lines.append(i)
        cur.words += counts[i]
    return out


def _sum(blocks: list[_Block]) -> int:
    return sum(x.words for x in blocks)


def _distinctive(piece: str, body: str, k: int) -> list[str]:
    """Names repeated in this piece but rare in the rest of the document (its title words are everywhere)."""
    tf = Counter(_TERM.findall(piece))
    cands = [(c, t) for t, c in tf.most_common(16) if c > 1 and t.lower() not in _STOP]
    ranked = sorted(((c * c / max(body.count(t), c), t) for c, t in cands), reverse=True)
    return [t for _, t in ranked[:k]]


def _description(b: _Block, lines: list[str]) -> str:
    """Sub-section names first (they are what a reader scans for), then the first sentence; 10-25 words."""
    covered = [h for h in b.subheadings if h.lower() not in _BACK_MATTER][:MAX_COVERED]
    words = ("Covers " + "; ".join(covered) + ".").split() if covered else []
    for i in b.lines:
        s = lines[i].strip()
        if "|" in s[:40] or s.startswith("<"):
            continue  # image captions, markup
        for w in s[:800].split():
            words.append(w)
            if len(words) > DESC_MAX_WORDS or (len(words) >= DESC_MIN_WORDS and w[-1] in ".!?"):
                break
        if len(words) >= DESC_MIN_WORDS:
            break
    if len(words) > DESC_MAX_WORDS:
        words = words[:DESC_MAX_WORDS]
        words[-1] = words[-1].rstrip(",;:") + "…"
    return " ".join(words)


def _title(b: _Block, lines: list[str], body: str, first: bool) -> str:
    """The document's own heading when the section starts at one; else its parent heading and/or names."""
    if b.headings:
        head = b.headings[0]
        if len(b.headings) > 1 and len(f"{head} {b.headings[1]}".split()) <= TITLE_MAX_WORDS:
            head = f"{head}: {b.headings[1]}"
        return head  # the document's own words, whole (a heading line has at most HEADING_MAX_WORDS)
    head = " ".join(b.parent.split()[: TITLE_MAX_WORDS - 2])
    skip = {w.lower().strip(",.:;()") for w in head.split()}
    terms = [t for t in _distinctive(_block_text(b, lines), body, 4) if t.lower() not in skip]
    if head:
        return f"{head}: {', '.join(terms[:2])}" if terms else head
    if not terms:
        return " ".join(lines[b.start].split()[:5]) or "Section"
    return ("Overview: " if first else "") + ", ".join(terms[:3])


def _block_text(b: _Block, lines: list[str]) -> str:
    return "\n".join(lines[i] for i in b.lines)


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
    out: list[SectionProposal] = []
    prev = offsets[body] - 1
    for k, b in enumerate(sections):
        anchor = _anchor(text, offsets[b.start], prev)
        prev = offsets[b.start]
        out.append(SectionProposal(_title(b, lines, body_text, k == 0), _description(b, lines), anchor))
    return Proposal(tuple(out))
