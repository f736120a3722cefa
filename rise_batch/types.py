"""The small data model every layer shares.

Plain NamedTuples and frozen dataclasses only: they pickle cheaply to Ray workers, print readably and cannot be
mutated behind a caller's back.
"""

from __future__ import annotations

from typing import NamedTuple

# Outcomes a document can end in (ARCHITECTURE.md says what each means): "toc" means a table of contents was inserted.
OUTCOME_TOC = "toc"
NO_TOC_OUTCOMES = ("llm-empty", "all-failed", "unparseable", "too-short", "error", "skipped")
OUTCOMES = (OUTCOME_TOC, *NO_TOC_OUTCOMES)


class Doc(NamedTuple):
    """One corpus row, with where it came from so errors can name file and row."""

    docid: str
    text: str
    url: str | None = None
    title: str | None = None
    source: str = ""
    row: int = -1


class BadRow(NamedTuple):
    """A row refused by the reader under `on_bad_row=skip`; it still ends in the outputs with its reason."""

    docid: str | None
    source: str
    row: int
    reason: str


class SectionProposal(NamedTuple):
    """One section as proposed (by an LLM or the heuristic): nothing about it is trusted yet."""

    title: str
    description: str
    anchor: str


class Proposal(NamedTuple):
    """A parsed model reply. `parse_note` records tolerated deviations ("fenced", "leading-prose")."""

    sections: tuple[SectionProposal, ...]
    parse_note: str = ""
    error: str = ""  # non-empty => unparseable
    malformed: int = 0  # entries dropped by the parser (e.g. no anchor); they count as proposed, not located


class AnchorOutcome(NamedTuple):
    """What validation made of one proposed anchor.

    status: "exact" | "normalized" | "prefix" (located) or "not-found" | "out-of-order" | "duplicate" (dropped).
    line: 0-indexed line of the ORIGINAL text holding the anchor start (-1 when dropped).
    """

    index: int
    status: str
    line: int = -1
    char: int = -1
    prefix_words: int = 0


class Section(NamedTuple):
    """A validated section: the heading goes immediately before `line` (0-indexed, original text)."""

    title: str
    description: str
    line: int


class Reply(NamedTuple):
    """What a chat transport returns: the text plus the usage that prices it."""

    text: str
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    model: str = ""
    constrained: bool = False  # the request carried a JSON schema (response_format) the server accepted
    replayed: bool = False  # answered from a reply kept from an earlier run (money/replies.py): paid then, not now


class DocResult(NamedTuple):
    """One checkpoint row: the recorded outcome of structuring one document."""

    docid: str
    content_hash: str
    run_hash: str
    outcome: str
    sections_json: str  # JSON list of [title, description, line] of validated sections
    anchors_proposed: int = 0
    anchors_exact: int = 0
    anchors_normalized: int = 0
    anchors_prefix: int = 0
    anchors_dropped_json: str = "{}"  # {"not-found": n, "out-of-order": n, "duplicate": n}
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    attempts: int = 0
    reasks: int = 0
    parse_note: str = ""
    tier: str = ""  # backend that produced it: "heuristic" | "llm"
    error: str = ""
    # the kept reply was schema-constrained (structured outputs); parts written before this field read as False
    schema_constrained: bool = False
