"""Rendering: the structured document (ARCHITECTURE.md), TOC ranges over the final file, the byte-exact invariant."""

from __future__ import annotations

import random

import pytest

from rise_batch.structure.anchors import body_start_line
from rise_batch.structure.render import TocEntry, parse_toc, render, strip_structure
from rise_batch.types import Section

from .helpers import check_structure


def random_sections(rng: random.Random, text: str, k: int) -> list[Section]:
    body = body_start_line(text)
    n = text.count("\n") + (0 if text.endswith("\n") else 1)
    candidates = list(range(body, n))
    chosen = sorted(rng.sample(candidates, min(k, len(candidates))))
    return [Section(f"Title {i}", f"Description number {i}", line) for i, line in enumerate(chosen)]


def test_invariant_on_every_sample_doc_with_random_sections(sample_docs) -> None:
    rng = random.Random(7)
    for doc in sample_docs:
        for k in (1, 2, 7, 40):
            secs = random_sections(rng, doc.text, k)
            check_structure(doc.text, render(doc.text, secs), secs)


EDGE_CASES = {
    "no-trailing-newline": "---\ntitle: x\n---\nFirst line\nSecond line\nThird line",
    "crlf": "---\r\ntitle: x\r\n---\r\nFirst line\r\n\r\nSecond line\r\nThird line\r\n",
    "empty-lines": "\n\n\nFirst line\n\n\n\nSecond line\n\n",
    "own-toc-lines": "## Table of Contents\n- L1\u20132: fake \u2014 entry\n=== DOCUMENT BODY ===\n## Heading\nText\n",
    "own-toc-after-fm": "---\nt: 1\n---\n## Table of Contents\n=== DOCUMENT BODY ===\nbody\n## x\n",
    "no-frontmatter": "Just a body.\nWith two lines.\n",
    "frontmatter-only-ish": "---\ntitle: x\n---\nonly line",
    "single-line": "one line without newline",
    "unicode-separators": "Line one\u2028still line one\nLine two\x0bstill two\n",
}


@pytest.mark.parametrize("name", sorted(EDGE_CASES))
def test_edge_cases_round_trip(name: str) -> None:
    text = EDGE_CASES[name]
    rng = random.Random(name)
    for k in (0, 1, 2, 3, 10):
        secs = random_sections(rng, text, k)
        check_structure(text, render(text, secs), secs)
    body = body_start_line(text)
    first = [Section("At body start", "", body)]  # a section on line 0 of the body
    check_structure(text, render(text, first), first)


def test_crlf_document_gets_crlf_lines() -> None:
    text = EDGE_CASES["crlf"]
    out = render(text, [Section("A", "d", 3)])
    assert "\n" not in out.replace("\r\n", "")
    assert out.startswith("---\r\ntitle: x\r\n---\r\n## Table of Contents\r\n- L7\u201311: A \u2014 d\r\n")


def test_exact_format() -> None:
    text = "---\ntitle: x\n---\nIntro\nBorn in Lyon.\nWorked in Paris.\n"
    out = render(text, [Section("Early life", "Childhood in Lyon.", 4), Section("Career", "Paris years.", 5)])
    assert out == (
        "---\ntitle: x\n---\n## Table of Contents\n"
        "- L9\u201310: Early life \u2014 Childhood in Lyon.\n"
        "- L11\u201312: Career \u2014 Paris years.\n"
        "=== DOCUMENT BODY ===\nIntro\n## Early life\nBorn in Lyon.\n## Career\nWorked in Paris.\n"
    )


def test_titles_and_descriptions_are_one_line() -> None:
    text = "a\nb\nc\n"
    secs = [Section("Multi\nline\r\ntitle\u2028x", "desc\nwith\x85breaks", 1), Section("  ", "", 2)]
    out = render(text, secs)
    assert "## Multi line title x\n" in out and "desc with breaks" in out
    assert "## Section 2\n" in out  # an empty title still gives a heading the strip step can recognise
    assert strip_structure(out) == text


@pytest.mark.parametrize("lines", [[2, 1], [1, 1], [5], [-1], [0]])
def test_invalid_section_lines_raise(lines: list[int]) -> None:
    text = "---\nt: 1\n---\nbody one\nbody two\n"  # body = lines 3, 4
    if lines == [0]:
        with pytest.raises(ValueError):
            render(text, [Section("fm", "", 0)])  # inside the frontmatter
        return
    with pytest.raises(ValueError):
        render(text, [Section("x", "", ln + 2) for ln in lines])


def test_strip_leaves_unrendered_text_alone() -> None:
    for text in EDGE_CASES.values():
        assert strip_structure(text) == text


@pytest.mark.parametrize("eol", ["\n", "\r\n"])
def test_parse_toc_reads_back_what_render_wrote(eol: str) -> None:
    """The one TOC parser: exact titles (an em dash inside a title is the heading's, not a separator), descriptions
    (an empty one filled from the section's lines)
    and 1-indexed ranges whose start line is the section's heading, LF and CRLF alike."""
    text = eol.join(["---", "title: X", "---", "Intro", "Born in Lyon.", "War \u2014 and peace.", "Worked.", ""])
    secs = [Section("Life \u2014 early", "Where \u2014 and when.", 4), Section("Later", "", 6)]
    out = render(text, secs)
    toc = parse_toc(out)
    assert toc is not None
    life = TocEntry(9, 11, "Life \u2014 early", "Where \u2014 and when.")
    assert toc.entries == [life, TocEntry(12, 13, "Later", "Entries: Worked.")]  # empty: from its own lines
    lines = out.split("\n")
    for e in toc.entries:
        assert lines[e.start - 1].rstrip("\r") == f"## {e.title}"
    assert lines[toc.body].rstrip("\r") == "## Table of Contents" and toc.marker == toc.body + 3
    assert parse_toc(text) is None and parse_toc(out.replace("L12\u201313", "L12\u201312")) is None


def test_an_empty_description_is_filled_from_the_section_so_every_line_keeps_its_shape() -> None:
    """An LLM may propose a section with an empty description: the line still reads `<title> — <description>`."""
    text = "---\ntitle: X\n---\nIntro line.\nThe war years were spent in Lyon working on stellar interiors.\nEnd.\n"
    out = render(text, [Section("Intro", "", 3), Section("War", "", 4), Section("", "", 5)])
    toc_lines = [ln for ln in out.split("\n") if ln.startswith("- L")]
    assert len(toc_lines) == 3 and all(" \u2014 " in ln and not ln.endswith(" \u2014 ") for ln in toc_lines)
    assert toc_lines[1].endswith("War \u2014 The war years were spent in Lyon working on stellar interiors.")
    assert strip_structure(out) == text


def test_parse_toc_still_reads_a_line_without_a_description() -> None:
    """Files rendered by older versions dropped ` — ` when a description was empty; they still parse."""
    text = "Intro\nBody.\n"
    out = render(text, [Section("Intro", "d", 0)]).replace(" \u2014 d", "")
    toc = parse_toc(out)
    assert toc is not None and toc.entries[0].title == "Intro" and toc.entries[0].description == ""
    assert strip_structure(out) == text
