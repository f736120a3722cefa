"""The offline structurer on real articles and on layouts it must recognise."""

from __future__ import annotations

import re
from typing import NamedTuple

from rise_batch.corpus.readers import iter_docs
from rise_batch.structure.anchors import validate_anchors
from rise_batch.structure.backends import HeuristicBackend
from rise_batch.structure.heuristic import is_too_short, propose_heuristic
from rise_batch.structure.render import BODY_MARKER, TOC_HEADER, strip_structure
from rise_batch.types import Doc
from tests.conftest import shared_data

FM = "---\ntitle: T\nurl: http://x\n---\n"


def sentence(i: int, n: int = 14) -> str:
    return " ".join(f"word{i}x{j}" for j in range(n - 1)) + f" end{i}."


def paragraph(i: int, sentences: int = 6) -> str:
    return " ".join(sentence(i * 100 + k) for k in range(sentences))


def test_coverage_and_anchor_quality_on_the_sample(sample_docs) -> None:
    long_docs = [d for d in sample_docs if len(d.text) >= 1500]
    with_two = 0
    for doc in sample_docs:
        p = propose_heuristic(doc.text)
        outs = validate_anchors(doc.text, [s.anchor for s in p.sections])
        assert all(o.status == "exact" for o in outs), doc.docid  # verbatim, in order, unique
        for s in p.sections:
            # one heading is kept whole (<= 10 words); several are shortened to fit together
            assert s.title and len(s.title) <= 120 and "\n" not in s.title
            assert 1 <= len(s.description.split()) <= 25
            assert 6 <= len(s.anchor.split()) <= 12 or len(s.anchor.split()) < 6 == len(p.sections)
        with_two += len(p.sections) >= 2 and len(doc.text) >= 1500
    assert with_two >= 0.9 * len(long_docs)


def test_wikiextractor_headings_become_sections() -> None:
    text = (
        FM
        + "Ada Lovelace\n\n"
        + paragraph(1)
        + "\nEarly life.\n"
        + paragraph(2)
        + "\n"
        + paragraph(3)
        + "\nWork with Babbage.\n"
        + paragraph(4)
        + "\n"
        + paragraph(5)
        + "\n"
    )
    p = propose_heuristic(text)
    titles = [s.title for s in p.sections]
    assert any(t.startswith("Early life") for t in titles) and any(t.startswith("Work with Babbage") for t in titles)
    lines = text.split("\n")
    located = [lines[o.line] for o in validate_anchors(text, [s.anchor for s in p.sections])]
    assert "Early life." in located and "Work with Babbage." in located  # the heading goes before the title line


def test_unheaded_long_text_is_split_at_paragraph_starts() -> None:
    paras = [paragraph(i, 10) for i in range(24)]  # ~3,400 words, no headings
    text = FM + "\n\n".join(paras) + "\n"
    p = propose_heuristic(text)
    assert 2 <= len(p.sections) <= 6
    outs = validate_anchors(text, [s.anchor for s in p.sections])
    lines = text.split("\n")
    assert all(lines[o.line] in paras for o in outs)  # each section starts on a paragraph's first line


def test_short_text_still_gets_two_sections() -> None:
    text = FM + paragraph(1, 4) + "\n" + paragraph(2, 4) + "\n" + paragraph(3, 3) + "\n"
    assert len(text) >= 1500
    assert len(propose_heuristic(text).sections) >= 2


def test_too_short() -> None:
    assert is_too_short(FM + "A short note.\nTwo lines.\n")
    assert is_too_short(FM + paragraph(1, 20))  # long but a single line: no line to cut before
    assert propose_heuristic(FM + "tiny\n").sections == ()
    assert not is_too_short(FM + paragraph(1, 3) + "\n" + paragraph(2, 3))


def test_deterministic(sample_docs) -> None:
    doc = sample_docs[0]
    assert propose_heuristic(doc.text) == propose_heuristic(doc.text)


def test_lists_and_citations_are_not_headings() -> None:
    items = [f"Order Number{i}iformes (fishes)" for i in range(8)]
    refs = ["Gordon, Uri, Anarchy Alive!, London 2007", "Category:Political culture"]
    text = FM + paragraph(1) + "\n" + "\n".join(items) + "\n" + paragraph(2) + "\n" + "\n".join(refs) + "\n"
    text += paragraph(3) + "\n"
    titles = {s.title for s in propose_heuristic(text).sections}
    assert not titles & {*items, *refs}


# The promised TOC line: every entry has a title and, after an em dash, a non-empty description.
TOC_LINE = re.compile(r"^- L(\d+)\u2013(\d+): (.+?) \u2014 (\S.*)$")
# What the issue calls a keyword list: "Overview: Kong, Hong, Chau", "History: Winstanley, Gerrard".
ENTRIES = "Entries: "  # a section with no prose line lists its first entries
KEYWORD_LIST = re.compile(r"^(?:[^:;]+: )?[^\W\d_][\w'’.-]*(?:, [^\W\d_][\w'’.-]*)+$")


class Entry(NamedTuple):
    title: str
    description: str
    lines: list[str]  # the section's lines of the original text (its inserted heading left out)


def structured(doc: Doc) -> list[Entry]:
    """The document through the heuristic backend, read back as a user's parser would read the file."""
    result, rendered = HeuristicBackend().structure_sync(doc, "test")
    assert strip_structure(rendered) == doc.text, doc.docid  # the byte-exact invariant
    if result.outcome != "toc":
        return []
    lines = rendered.split("\n")
    toc = lines[lines.index(TOC_HEADER) + 1 : lines.index(BODY_MARKER)]
    entries = []
    for ln in toc:
        m = TOC_LINE.match(ln)
        assert m, f"{doc.docid}: TOC line not '- L<a>–<b>: <title> — <description>': {ln!r}"
        entries.append(Entry(m[3], m[4], lines[int(m[1]) : int(m[2])]))
    return entries


def wiki2015_docs(part: str, docids: set[str] | None = None, limit: int = 0) -> list[Doc]:
    docs = []
    for doc in iter_docs(shared_data(f"wiki2015/{part}")):
        if docids is None or doc.docid in docids:
            docs.append(doc)
        if (docids is not None and len(docs) == len(docids)) or (limit and len(docs) >= limit):
            break
    return docs


def test_every_entry_has_a_description(sample_docs) -> None:
    # 43119 "Breakbeat hardcore" ends in a section of XML dump lines: it used to get no description at all.
    docs = sample_docs + wiki2015_docs("part-06.parquet", {"43119"}) + wiki2015_docs("part-00.parquet", limit=400)
    assert docs[100].docid == "43119"
    assert all(structured(doc) for doc in docs[:101])  # parses every line, or fails naming the document and line
    assert sum(bool(structured(doc)) for doc in docs[101:]) > 350


def test_no_title_is_a_keyword_list(sample_docs) -> None:
    # The lead of every sample article used to be titled like "Overview: Anarchism, Authority, Church".
    for doc in sample_docs:
        for e in structured(doc):
            assert not KEYWORD_LIST.match(e.title), f"{doc.docid}: keyword-list title {e.title!r}"


def _from_one_line(e: Entry) -> bool:
    """A description is cut from one line of its section (or lists a few whole entries), never glued from several."""
    desc = e.description.removesuffix("…")
    lines = [" ".join(ln.split()) for ln in e.lines]  # render collapses runs of spaces
    if desc.startswith(ENTRIES):
        return all(any(item in ln for ln in lines) for item in desc.removeprefix(ENTRIES).split("; "))
    return any(desc.rstrip(",;:") in ln for ln in lines)


def test_descriptions_do_not_run_lines_together(sample_docs) -> None:
    # e.g. Ayn Rand's lead ended "novelist, philosopher,; ; ; ." and a list of scientists read
    # "Robert Bakewell Norman Borlaug Luther Burbank George Washington Carver".
    glued = [(d.docid, e.description) for d in sample_docs for e in structured(d) if not _from_one_line(e)]
    assert not glued, glued[:5]


def _entry_with(entries: list[Entry], *lines: str) -> Entry:
    return next(e for e in entries if all(ln in e.lines for ln in lines))


def test_a_merged_section_names_every_heading_it_holds() -> None:
    docs = {d.docid: d for d in wiki2015_docs("part-00.parquet", {"2274", "13404"})}
    eddington = structured(docs["2274"])
    e = _entry_with(eddington, "Death.", "Astronomy.")  # was titled "Death", mostly about his astronomy
    assert "Death" in e.title and "Astronomy" in e.title, e.title
    hong_kong = structured(docs["13404"])
    assert {"Name", "History"} <= set(re.findall(r"\w+", _entry_with(hong_kong, "Name.", "History.").title))
    e = _entry_with(
        hong_kong, "Japanese occupation: 1941-45.", "Resumption of British rule and Industrialisation: 1945-97."
    )
    assert "Japanese occupation" in e.title and "Resumption of British rule" in e.title, e.title
    assert "1941" not in e.title and "1945" not in e.title  # shortened: the two headings whole take 87 characters


def test_headless_text_gets_phrase_titles(sample_docs) -> None:
    """Real prose with its headings taken out (as web pages and passages come): titles are phrases of the text."""
    for doc in sample_docs[:40]:
        fm, body = doc.text.split("\n---\n", 1)
        prose = [ln for ln in body.split("\n") if len(ln.split()) >= 15]
        headless = Doc(doc.docid, fm + "\n---\n" + "\n".join(prose) + "\n")
        for e in structured(headless):
            assert not KEYWORD_LIST.match(e.title), f"{doc.docid}: keyword-list title {e.title!r}"
            text = " ".join(e.lines).lower()
            for phrase in e.title.split(" and "):
                assert phrase.lower() in text, f"{doc.docid}: {phrase!r} of {e.title!r} is not in its section"
