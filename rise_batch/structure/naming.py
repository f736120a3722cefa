"""Names for the heuristic's sections: titles and descriptions taken from the document's own words.

The heuristic TOC is what most of a large corpus gets when the LLM budget is limited, so its lines must read as
a table of contents: a title says what the section covers, a description says what it starts with. Nothing is
invented: a title is the document's headings (shortened when several share a section) or a phrase that occurs
in the section; a description is cut from one line (joining lines ran citation fragments, table cells and list
items together, e.g. "novelist, philosopher,; ; ; ."), or, where there is no prose at all, lists the first few
lines as "Entries: a; b; c". Everything here runs on at most a few thousand characters per section, with regexes
doing the scanning, because the heuristic must stay above 500 documents per second.
"""

from __future__ import annotations

import re
from collections import Counter

DESC_MIN_WORDS, DESC_MAX_WORDS = 10, 25
TITLE_MAX_CHARS = 60  # several headings in one title lose their qualifiers past this (one is kept whole) ...
TITLE_SOFT_MAX = 90  # ... and their last words past this
ENTRIES = "Entries: "  # the description of a section with no prose line: its first lines, "; "-separated
MAX_ENTRIES = 4
PHRASE_SCAN_CHARS = 6000  # a headless part is named from its first ~1,000 words
PROSE_SCAN_LINES = 40  # lines searched for a prose line before falling back to entries

_FUNCTION = """a an the of and or in on at to by for as is was are be been it its his her he she him they we i you
    that this with from not but which who whom has had have were their our my your one two may can also than
    then so if no nor such into onto about after before over under while when where there these those what
    all any some more most other each both either neither only own same very just being did does do""".split()
_CONTENT_STOP = """although among another because between could during every first further having here however
    itself last later many much must never next several should since thus until upon whose will within without
    would against along around became become following like made make known part states state called named used
    using well above across january february march april may june july august september october november
    december retrieved archived isbn pp vol see new""".split()
_STOP = frozenset(_FUNCTION + _CONTENT_STOP)
_WORD = r"[^\W\d_][\w'’-]*"
_CONTENT_WORD = rf"(?!(?:{'|'.join(sorted(_STOP, key=len, reverse=True))})(?![\w'’-])){_WORD}"
# Up to four content words in a row, separated by single spaces: what is left of a text between its punctuation,
# digits and function words ("Gerrard Winstanley", "general relativistic cosmological models").
_PHRASE = re.compile(rf"(?<![\w'’-]){_CONTENT_WORD}(?: {_CONTENT_WORD}){{0,3}}(?![\w'’-])", re.IGNORECASE)
_QUALIFIER = re.compile(r" \(|: | [–—-] ")  # "British Crown Colony: 1842-1941", "New York Yankees (1977–81)"
_CONNECTOR = frozenset("a an the of and or in on at to by for with from".split())
# Reference-list and template lines are short prose-looking lines too; they never describe a section.
_CITATION = re.compile(r"\bISBN\b|\bdoi\b|\bRetrieved\b|https?://|\bpp?\. ?\d|\bet al\.|^\^")
_MARKUP_START = "|!{}<[*#=+;:"
_WORD_SPAN = re.compile(r"\S+")
_GLUED_END = re.compile(r"[a-z)][.!?][\"”]?(?=[A-Z])")  # "Inheritance.The": a citation glued after the sentence


def phrase(text: str, body: str, skip: frozenset[str] = frozenset(), distinct: bool = True) -> str:
    """The section's most telling phrase: repeated, multi-word and (when `distinct`) rarer elsewhere in `body`.

    The lead of a document is named after what it repeats most (its subject); a later piece after what sets it
    apart from the rest, since the document's subject is repeated everywhere. Words in `skip` (the heading the
    piece continues) name nothing new. Returns "" when the text has no content word of four letters.
    """
    counts: Counter[str] = Counter()
    surface: dict[str, str] = {}
    for m in _PHRASE.finditer(text, 0, min(len(text), PHRASE_SCAN_CHARS)):
        p = m.group()
        key = p.lower()
        counts[key] += 1
        surface.setdefault(key, p)
    best, best_score = "", 0.0
    for key, c in counts.most_common(24):
        words = key.split()
        if all(len(w) < 4 for w in words) or all(w in skip for w in words):
            continue
        score = c * (1.0 + 0.6 * (len(words) - 1))
        if distinct:
            score *= c / max(body.count(surface[key]), c)
        if score > best_score:
            best, best_score = surface[key], score
    return best[:1].upper() + best[1:]


def doc_title(frontmatter: list[str]) -> str:
    """The frontmatter's `title:` without quotes or a trailing qualifier ("Joan Crawford (part 1)" -> "Joan
    Crawford"); the lead is named after it when the lead's text says it (a title of four words or fewer)."""
    for ln in frontmatter:
        if ln.startswith("title:"):
            t = ln[6:].strip().strip("\"'")
            t = _QUALIFIER.split(t, 1)[0].strip()
            return t if 0 < len(t.split()) <= 4 else ""
    return ""


def is_name(label: str) -> bool:
    """A heading worth naming: lines broken mid-sentence ("and to test", "for") pass as headings too."""
    return bool(label) and not label[0].islower() and any(len(w) >= 3 for w in label.split())


def shorten(name: str, max_words: int) -> str:
    """A heading cut before its qualifier and to `max_words`, never ending on a connector ("History of the")."""
    head = _QUALIFIER.split(name, 1)[0].strip() or name
    words = head.split()[:max_words]
    while len(words) > 1 and words[-1].lower() in _CONNECTOR:
        words.pop()
    return " ".join(words).rstrip(",;:")


def join_names(names: list[str]) -> str:
    """Every name in one title. Past TITLE_MAX_CHARS their qualifiers go ("Japanese occupation: 1941-45"); past
    TITLE_SOFT_MAX the longest name loses its last word, repeatedly, so each keeps its leading words."""
    title = "; ".join(names)
    if len(names) < 2 or len(title) <= TITLE_MAX_CHARS:
        return title
    parts = [shorten(x, 99).split() for x in names]
    while len(title := "; ".join(" ".join(p) for p in parts)) > TITLE_SOFT_MAX:
        longest = max((p for p in parts if len(p) > 1), key=lambda p: len(" ".join(p)), default=None)
        if longest is None:
            break  # a dozen one-word headings: render cuts past 120 characters at a word boundary
        longest.pop()
        while len(longest) > 1 and longest[-1].lower() in _CONNECTOR:
            longest.pop()
    return title


def is_prose(s: str) -> bool:
    """A sentence-bearing line: not markup, a table row, a citation or a list of names (few lowercase words)."""
    if len(s) < 20 or s[0] in _MARKUP_START or "|" in s[:40] or _CITATION.search(s, 0, 120):
        return False
    words = s.split(None, 30)[:30]
    return len(words) >= 4 and 4 * sum(w[0].islower() for w in words) >= len(words)


def _cut(s: str, n_words: int) -> str:
    """`s` up to the end of its `n_words`-th word, spacing kept (render collapses it)."""
    end = 0
    for _, m in zip(range(n_words), _WORD_SPAN.finditer(s), strict=False):
        end = m.end()
    return s[:end]


def sentence(line: str) -> str:
    """The first sentence of one line, DESC_MIN_WORDS..DESC_MAX_WORDS words; "…" when cut mid-sentence."""
    n = 0
    for m in _WORD_SPAN.finditer(line):
        n += 1
        w = m.group()
        glued = _GLUED_END.search(w) if n >= DESC_MIN_WORDS else None
        if glued:
            return line[: m.start() + glued.end()]
        if n >= DESC_MAX_WORDS or (n >= DESC_MIN_WORDS and w[-1] in ".!?"):
            out = line[: m.end()]
            return out if w[-1] in ".!?" or m.end() == len(line) else out.rstrip(",;:") + "…"
    return line.rstrip(",;:")


def describe(parts: list[list[int]], lines: list[str]) -> str:
    """One prose line's first sentence, from the largest part first; else the first lines as entries.

    Never empty for a section with a content line: the promised "- L<a>–<b>: <title> — <description>" shape.
    """
    sized = sorted(parts, key=lambda idx: -sum(lines[i].count(" ") + 1 for i in idx))
    for idx in sized:
        for i in idx[:PROSE_SCAN_LINES]:
            s = lines[i].strip()
            if is_prose(s):
                return sentence(s)
    return entries([i for idx in parts for i in idx], lines)


def entries(idx: list[int], lines: list[str]) -> str:
    """A section without prose (a table, a reference list, template fields): its first lines, each kept whole."""
    items: list[str] = []
    n = len(ENTRIES.split())  # the label counts towards DESC_MAX_WORDS
    for i in idx[:PROSE_SCAN_LINES]:
        s = lines[i].strip().lstrip(_MARKUP_START + " -").strip()
        k = len(s.split())
        if not k:
            continue
        items.append(_cut(s, DESC_MAX_WORDS - n))
        n += k
        if n >= DESC_MAX_WORDS or len(items) >= MAX_ENTRIES:
            break
    if not items:  # only markup characters: quote the first line itself
        items.append(_cut(lines[idx[0]].strip(), DESC_MAX_WORDS))
    out = ENTRIES + "; ".join(items)
    return out + "…" if n > DESC_MAX_WORDS else out
