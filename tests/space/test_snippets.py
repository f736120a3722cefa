"""The snippet-toc system's tools over real structured documents (the structure job's output) and a real BM25 index:
every listed section's range is the file's real section, reads by range land on it, a document without a TOC is
one section, and what a search shows is what it counts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rise_batch.agent.systems import get_system, open_tools
from rise_batch.index import build_index, load_index
from rise_batch.space.docstore import DocStore
from rise_batch.space.snippets import SnippetTocTools, sections_of
from rise_batch.structure.render import parse_toc
from tests.agent.helpers import world
from tests.conftest import sample_rows, write_jsonl
from tests.space.conftest import make_docs

LISTED = re.compile(r"^\[(\d+)\] (\S.*?\.txt)  L(\d+)\u2013(\d+)  score ([\d.]+)$", re.MULTILINE)
FIRST = re.compile(r"^    L(\d+): (.*)$")
NUMBERED = re.compile(r"^\s*(\d+)\t(.*)$", re.MULTILINE)


@pytest.fixture(scope="module")
def structured():
    """The agent tests' world: 30 sample articles through the real structure job (heuristic TOCs) + its index."""
    w = world()
    store = DocStore(w.docs)
    tools, ws = open_tools(get_system("snippet-toc"), store, lambda: load_index(w.index, backend="numpy"), None)
    assert ws is None and isinstance(tools, SnippetTocTools)  # no workspace, no sandbox: nothing runs a command
    return w, store, tools


def flat(line: str) -> str:
    """A line as previews show it: whitespace runs as one space (a cut line shows its first 300 characters)."""
    return " ".join(line.split())


def listing(text: str) -> list[dict]:
    """The sections a search printed, each with its first lines."""
    out, blocks = [], LISTED.split(text)
    for m, rest in zip(LISTED.finditer(text), blocks[6::6], strict=True):
        firsts = [(int(f.group(1)), f.group(2)) for f in map(FIRST.match, rest.split("\n")) if f]
        title = re.search(r"^    title: (.*)$", rest, re.MULTILINE)
        out.append({"path": m.group(2), "start": int(m.group(3)), "end": int(m.group(4)), "first": firsts})
        out[-1]["title"] = title.group(1) if title else None
    return out


def test_listed_ranges_are_the_files_real_sections(structured):
    w, store, tools = structured
    checked = 0
    for title in [t for t in w.titles.values() if len(t) > 2][:12]:  # "A" has no term: tokens are 2+ characters
        res = tools.call("search", {"query": title})
        shown = listing(res.text)
        assert shown and not res.error, res.text
        for s in shown:
            lines = (store.corpus_dir / s["path"]).read_text(encoding="utf-8").split("\n")
            toc = parse_toc("\n".join(lines))
            assert toc is not None, s["path"]  # the heuristic gave every sample article a TOC
            entry = next(e for e in toc.entries if (e.start, e.end) == (s["start"], s["end"]))
            assert s["title"] == entry.title
            read = tools.call("read", {"path": s["path"], "start": s["start"], "end": s["end"]})
            got = [(int(n), text) for n, text in NUMBERED.findall(read.text)]
            assert got[0] == (s["start"], f"## {entry.title}"), "the range does not start at its section heading"
            assert got[-1][0] == s["end"] and len(got) == s["end"] - s["start"] + 1
            assert store.docid(s["path"]) in read.surfaced
            for n, text in s["first"]:  # the first lines shown are the file's lines at those numbers
                assert s["start"] < n <= s["end"] and flat(lines[n - 1]).startswith(text[:200])
            checked += 1
    assert checked >= 30


def test_a_query_for_one_section_lists_it_first(structured):
    """Ranking is by section, not by document: a section's own description finds that section, not its first."""
    w, store, tools = structured
    hits = 0
    for docid in list(w.titles)[:10]:
        toc = parse_toc(store.path(docid).read_text(encoding="utf-8"))
        entry = max(toc.entries[1:], key=lambda e: len(e.description))
        top = listing(tools.call("search", {"query": entry.description}).text)[0]
        hits += (top["path"], top["start"], top["end"]) == (store.relpath[docid], entry.start, entry.end)
    assert hits >= 8, f"only {hits}/10 descriptions found their own section first"


def test_what_a_search_shows_is_what_it_counts(structured):
    w, store, tools = structured
    fresh = SnippetTocTools(tools.index, store, top=6, per_doc=2)
    res = fresh.call("search", {"query": "war history government"})
    shown = listing(res.text)
    docids = [store.docid(s["path"]) for s in shown]
    assert len(shown) == 6 and max(docids.count(d) for d in docids) <= 2
    assert list(res.surfaced) == list(dict.fromkeys(docids)) == list(res.retrieved)
    again = fresh.call("search", {"query": ["war", "history", "government"]})  # a list is joined
    assert again.text.startswith("Note: `query` arrived as a list") and again.retrieved == ()
    assert again.surfaced == res.surfaced
    assert fresh.call("search", {"query": "the of and"}).text.startswith('No sections match "the of and"')


def test_read_by_range_is_bounded_and_never_raises(structured):
    w, store, tools = structured
    rel = store.relpath[next(iter(w.titles))]
    total = len(store.path(next(iter(w.titles))).read_text(encoding="utf-8").rstrip("\n").split("\n"))
    assert "continue with start=4]" in tools.call("read", {"path": rel, "start": 2, "end": 3}).text
    past = tools.call("read", {"path": rel, "start": total + 5, "end": total + 9}).text
    assert past == f"[start {total + 5} is past the end: the file has {total} lines (valid start 1-{total})]"
    assert tools.call("read", {"path": rel, "start": 1, "end": 10**9}).text.startswith("[range capped at 2000 lines]")
    for bad in ('{"path": "%s", "start": NaN, "end": 3}', '{"path": "%s", "start": 1, "end": 1e400}'):
        assert tools.call("read", bad % rel).text == "error: start and end must be integer line numbers"
    assert tools.call("read", {"path": rel, "start": 0, "end": 3}).error
    assert "need 1 <= start <= end" in tools.call("read", {"path": rel, "start": 9, "end": 3}).text
    assert "'..' is not allowed" in tools.call("read", {"path": "../docmap.parquet", "start": 1, "end": 2}).text


def test_a_document_without_a_toc_is_one_section(tmp_path: Path):
    """make_docs structures only its first document; the others are plain articles with frontmatter."""
    docs, relpaths = make_docs(tmp_path / "docs")
    write_jsonl(tmp_path / "corpus.jsonl", sample_rows(len(relpaths)))
    build_index(tmp_path / "corpus.jsonl", tmp_path / "index", workers=1)
    store = DocStore(docs)
    tools = SnippetTocTools(load_index(tmp_path / "index", backend="numpy"), store, per_doc=5)
    plain = [d for d in relpaths if parse_toc(store.path(d).read_text(encoding="utf-8")) is None]
    assert len(plain) == len(relpaths) - 1
    docid = max(plain, key=lambda d: len(relpaths[d]))  # a title the tokenizer keeps (not the article "A")
    text = store.path(docid).read_text(encoding="utf-8")
    lines = text.rstrip("\n").split("\n")
    (only,) = sections_of(docid, relpaths[docid], text)
    body = lines.index("---", 1) + 2  # the first line after the frontmatter, 1-indexed
    assert (only.start, only.end, only.description) == (body, len(lines), "")
    assert only.first and all(flat(lines[n - 1]).startswith(t[:100]) for n, t in only.first)
    res = tools.call("search", {"query": only.title})
    mine = [s for s in listing(res.text) if s["path"] == relpaths[docid]]
    assert [(s["start"], s["end"], s["title"]) for s in mine] == [(body, len(lines), only.title)]
