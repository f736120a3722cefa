"""The offline structurer on real articles and on layouts it must recognise."""

from __future__ import annotations

from rise_batch.structure.anchors import validate_anchors
from rise_batch.structure.heuristic import is_too_short, propose_heuristic

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
            # the document's own heading is kept whole (<= 10 words); made-up titles stay within 7 words
            assert 1 <= len(s.title.split()) <= 10 and "\n" not in s.title
            assert len(s.description.split()) <= 25
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
