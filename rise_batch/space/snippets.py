"""The snippet-TOC system's tools: search returns matching TOC sections of the structured corpus, read fetches one.

This is the configuration the paper leaves unrun: a retrieval agent whose unit is a section, not a document.
`search` asks the index for the best `candidates` documents, splits each along its table of contents (the one
parser, `structure.render.parse_toc`; a document without a consistent TOC is one section, its whole body), and
ranks the sections of all candidates together by BM25 over their own text (heading title, TOC description,
section lines, and the document's title, so a section of the "Lyon" article is about Lyon), with the index's own
tokenizer so query terms match as they do in the index. It shows the top `top` sections (at most `per_doc` from
one document, so one long article does not fill the list): path, line range, title, description and the
section's first lines with their numbers. `read(path, start, end)` fetches a range as the TOC prints it.

What a call shows is what it counts: the docids of the listed sections are `surfaced`, and those not listed
before are `retrieved` (the search union, gold_R's denominator), as for the retrieval agent's top-5.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable
from typing import Any, NamedTuple

from rise_batch.corpus.docmap import frontmatter_title
from rise_batch.index.tokenize import TokenizerSettings, query_tokenizer
from rise_batch.space import schemas
from rise_batch.space.docstore import DocStore
from rise_batch.space.fileview import MAX_READ_LINES
from rise_batch.space.safe_open import NotADocument
from rise_batch.space.tools import SearchIndex, ToolResult, ToolSet, one_query, read_in
from rise_batch.structure.anchors import body_start_line
from rise_batch.structure.render import RANGE_DASH, one_line, parse_toc

log = logging.getLogger(__name__)
SCORED_CHARS = 20_000  # of a section's text: bounds one search's tokenizing (50 candidates x a few sections)
FIRST_LINE_CHARS = 300
BM25_K1, BM25_B = 1.5, 0.75  # bm25s's defaults, the index's own


class Section(NamedTuple):
    docid: str
    relpath: str
    start: int  # 1-indexed inclusive lines of the file, as the TOC prints them (start is the `## ` heading)
    end: int
    title: str
    description: str
    first: list[tuple[int, str]]  # (line number, text) of its first non-empty lines after the heading
    text: str  # what is scored


def sections_of(docid: str, relpath: str, text: str, n_first: int = 3) -> list[Section]:
    """A structured document's TOC sections; without a consistent TOC, one section: the whole body."""
    doc_title = frontmatter_title(text) or ""
    toc = parse_toc(text)
    if toc is not None:
        spans = [(e.start, e.end, e.title, e.description, e.start) for e in toc.entries]
        lines = toc.lines
    else:
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if not lines:
            return []
        body = body_start_line(text)
        start = body + 1 if body < len(lines) else 1
        spans = [(start, len(lines), doc_title or relpath, "", start - 1)]
    out = []
    for start, end, title, desc, first_body in spans:
        body_lines = [ln.rstrip("\r") for ln in lines[first_body:end]]
        first = [(first_body + 1 + i, one_line(ln, FIRST_LINE_CHARS)) for i, ln in enumerate(body_lines) if ln.strip()]
        scored = "\n".join((doc_title, title, desc, "\n".join(body_lines)[:SCORED_CHARS]))
        out.append(Section(docid, relpath, start, end, title, desc, first[:n_first], scored))
    return out


def rank_sections(sections: list[Section], query_terms: list[str], terms: Callable[[str], list[str]]):
    """[(score, section)] best first, BM25 with the statistics of this pool of sections; unmatched ones left out.

    Ties keep the pool's order (candidate documents best first, sections in file order)."""
    if not sections or not query_terms:
        return []
    wanted = set(query_terms)
    tfs, lengths = [], []
    for s in sections:
        toks = terms(s.text)
        lengths.append(len(toks))
        tfs.append(Counter(t for t in toks if t in wanted))
    n = len(sections)
    avgdl = (sum(lengths) / n) or 1.0
    df = Counter(t for tf in tfs for t in tf)
    idf = {t: math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in wanted}
    scored = []
    for s, tf, dl in zip(sections, tfs, lengths, strict=True):
        norm = BM25_K1 * (1 - BM25_B + BM25_B * dl / avgdl)
        score = sum(idf[t] * tf[t] * (BM25_K1 + 1) / (tf[t] + norm) for t in query_terms if tf[t])
        if score > 0:
            scored.append((score, s))
    scored.sort(key=lambda x: -x[0])  # stable: ties stay in pool order
    return scored


def index_terms(index: Any) -> Callable[[str], list[str]]:
    """The tokenizer the index was built with (its meta records it), else the default: query and sections must be
    cut into terms alike."""
    settings = getattr(getattr(index, "meta", None), "tokenizer", None)
    return query_tokenizer(settings if isinstance(settings, TokenizerSettings) else TokenizerSettings())


class SnippetTocTools(ToolSet):
    """search (top TOC sections of the best BM25 documents) + read (a line range of a corpus file)."""

    def __init__(
        self,
        index: SearchIndex,
        store: DocStore,
        *,
        candidates: int = 50,
        top: int = 10,
        per_doc: int = 3,
        first_lines: int = 3,
    ) -> None:
        self.index, self.store = index, store
        self.candidates, self.top, self.per_doc, self.first_lines = candidates, top, per_doc, first_lines
        self.terms = index_terms(index)
        self.seen: set[str] = set()
        self.tools = {"search": self.search, "read": self.read}
        self.schemas = [
            schemas.snippet_search_schema(top, candidates, first_lines),
            schemas.read_range_schema(MAX_READ_LINES),
        ]

    def search(self, query: Any) -> ToolResult:
        query, note = one_query(query)
        if not query:
            return ToolResult("error: `query` must be a non-empty string", error=True)
        hits = self.index.search([query], self.candidates)[0]
        pool: list[Section] = []
        missing = 0
        for docid in hits.docids:
            try:  # a regular file reached without a link; a FIFO, a device or a symlink is refused
                raw = self.store.read(docid)
            except NotADocument as e:
                log.warning("%s", e)
                raw = None
            except OSError:
                raw = None
            if raw is None:
                missing += 1
                continue
            pool += sections_of(
                docid, self.store.relpath[docid], raw.decode("utf-8", errors="replace"), self.first_lines
            )
        shown: list[tuple[float, Section]] = []
        per: Counter[str] = Counter()
        for score, s in rank_sections(pool, self.terms(query), self.terms):
            if per[s.docid] < self.per_doc:
                per[s.docid] += 1
                shown.append((score, s))
                if len(shown) == self.top:
                    break
        out = [note + f'{len(shown)} sections for "{query}" (from {len(hits.docids) - missing} candidate documents):']
        if not shown:
            out = [note + f'No sections match "{query}".']
        for rank, (score, s) in enumerate(shown, 1):
            out.append(f"\n[{rank}] {s.relpath}  L{s.start}{RANGE_DASH}{s.end}  score {score:.2f}")
            out.append(f"    title: {s.title}")
            if s.description:
                out.append(f"    description: {s.description}")
            out += [f"    L{n}: {line}" for n, line in s.first]
        if missing:
            out.append(
                f"\n[{missing} candidate documents have no readable regular file in the docs directory; skipped]"
            )
        docids = tuple(dict.fromkeys(s.docid for _, s in shown))
        new = tuple(d for d in docids if d not in self.seen)
        self.seen.update(new)
        return ToolResult("\n".join(out), surfaced=docids, retrieved=new)

    def read(self, path: Any, start: Any = 1, end: Any = None) -> ToolResult:
        """Lines start..end (1-indexed, inclusive) of a corpus file: a TOC range `L69–89` is start=69, end=89."""
        try:
            first = int(start)
            last = first + MAX_READ_LINES - 1 if end is None else int(end)
        except (TypeError, ValueError, OverflowError):  # NaN, 1e400 (inf), "ten", a list
            return ToolResult("error: start and end must be integer line numbers", error=True)
        if first < 1 or last < first:
            return ToolResult(f"error: need 1 <= start <= end (got start={first}, end={last})", error=True)
        return read_in(self.store.docs, path, first - 1, last - first + 1, self.store.docid, by_line=True)
