"""Deterministic section proposals from the document in a structuring request, as a diligent model would give.

Sections start at heading-like lines (short lines followed by longer prose, e.g. Wikipedia headings that survive
as their own line) or, when a document has none, at paragraph starts spread evenly through it. Anchors are 6-12
words from the start of those lines (or of the prose line after a heading), joined by single spaces: an anchor
inside one line is verbatim, one that runs past a short heading line into the next only matches after whitespace
normalisation, so both validation paths see traffic. Pure functions of the document text: the same document
always gets the same proposal.
"""

from __future__ import annotations

import json
import re

from rise_batch.fake_llm.faults import draw

DOC_OPEN, DOC_CLOSE = "<document>\n", "\n</document>"
MAX_SECTIONS = 12
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


def extract_document(user_content: str) -> str | None:
    """The text between `<document>\\n` and the last `\\n</document>`, or None when the message has none."""
    start = user_content.find(DOC_OPEN)
    end = user_content.rfind(DOC_CLOSE)
    if start < 0 or end < start + len(DOC_OPEN) - 1:
        return None
    return user_content[start + len(DOC_OPEN) : end]


def body_start(text: str) -> int:
    """Offset just after a leading YAML frontmatter block (0 when there is none)."""
    if not text.startswith("---\n"):
        return 0
    end = text.find("\n---\n", 3)
    if end >= 0:
        return end + len("\n---\n")
    return len(text) if text.endswith("\n---") else 0


def _is_heading(line: str, following: str) -> bool:
    words = line.split()
    return (
        0 < len(words) <= 10
        and len(line) <= 80
        and (line[0].isupper() or line[0].isdigit())
        and not line.rstrip().endswith((",", ";", ":"))
        and len(following) >= max(2 * len(line), 60)
    )


def _lines(body: str) -> list[str]:
    return body.split("\n")


def _pick_lines(lines: list[str], body_len: int) -> list[int]:
    """Indices of the lines that start sections."""
    text_lines = [i for i, line in enumerate(lines) if line.strip()]
    if not text_lines:
        return []
    nxt = {a: b for a, b in zip(text_lines, text_lines[1:], strict=False)}
    headings = [i for i in text_lines if i in nxt and _is_heading(lines[i].strip(), lines[nxt[i]].strip())]
    starts = [text_lines[0]] + [i for i in headings if i != text_lines[0]]
    if len(starts) < 2:  # no layout to follow: paragraph starts at even spacing, ~1 section per 3,000 chars
        want = max(1, min(8, body_len // 3000 + 1))
        paragraphs = [i for i in text_lines if len(lines[i].split()) >= 6] or text_lines
        starts = sorted({paragraphs[k * len(paragraphs) // want] for k in range(want)})
    if len(starts) > MAX_SECTIONS:
        starts = [starts[k * len(starts) // MAX_SECTIONS] for k in range(MAX_SECTIONS)]
    return starts


def _words_from(lines: list[str], index: int, count: int) -> list[str]:
    words: list[str] = []
    for line in lines[index:]:
        words.extend(line.split())
        if len(words) >= count:
            break
    return words[:count]


def _describe(lines: list[str], index: int) -> str:
    """The first sentence of the section's prose, cut to 10-25 words."""
    prose = " ".join(line.strip() for line in lines[index : index + 4] if line.strip())
    if _is_heading(lines[index].strip(), prose):
        prose = prose[len(lines[index].strip()) :].strip()
    first = _SENTENCE_END.split(prose, maxsplit=1)[0].split()
    words = first if len(first) >= 10 else prose.split()
    return " ".join(words[:25])


def propose_sections(document: str) -> list[dict[str, str]]:
    """Section proposals in reply-schema form: [{"title", "description", "anchor"}, ...]."""
    body = document[body_start(document) :]
    lines = _lines(body)
    key = str(len(document)) + document[:64]
    sections = []
    for n, i in enumerate(_pick_lines(lines, len(body))):
        line = lines[i].strip()
        heading = _is_heading(line, "x" * 200)
        # Half of the heading sections are anchored on the prose line after the heading, as models often do.
        at = i + 1 if heading and i + 1 < len(lines) and lines[i + 1].strip() and draw(1, key, n) < 0.5 else i
        anchor = _words_from(lines, at, 6 + int(draw(0, key, n) * 7))
        title_words = line.rstrip(".").split()[:7] if heading else line.split()[:4]
        sections.append(
            {"title": " ".join(title_words), "description": _describe(lines, i), "anchor": " ".join(anchor)}
        )
    return sections


def structuring_reply(document: str) -> str:
    return json.dumps({"sections": propose_sections(document)}, ensure_ascii=False)
