"""The LLM side of structuring: the request messages, the reply's JSON schema and a tolerant, honest reply parser.

Messages put the fixed system prompt first and the document last, so every request of a run shares one long
identical prefix and provider prompt caching applies. The parser accepts what models really send (a ```json
fence, a sentence before or after the JSON, a bare list instead of the object) but records each such deviation in
`parse_note`, so a run can tell a clean model from a sloppy one; anything that is not JSON is `unparseable`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rise_batch.prompts import json_schema_format
from rise_batch.types import Proposal, SectionProposal

DOC_OPEN = "<document>\n"
DOC_CLOSE = "\n</document>"

_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\r?\n?(.*?)```", re.DOTALL)
_DECODER = json.JSONDecoder()
MAX_JSON_STARTS = 64  # bracket positions tried in a prose reply; bounds the work on long garbage

# The reply the prompt asks for, as a strict schema: a provider with structured outputs then can only send this
# object (no fence, no prose, no entry without an anchor), and the tolerant parser below stays for those without.
_STRING = {"type": "string"}
SECTION_SCHEMA = {
    "type": "object",
    "properties": {"title": _STRING, "description": _STRING, "anchor": _STRING},
    "required": ["title", "description", "anchor"],
    "additionalProperties": False,
}
TOC_SCHEMA = {
    "type": "object",
    "properties": {"sections": {"type": "array", "items": SECTION_SCHEMA}},
    "required": ["sections"],
    "additionalProperties": False,
}
TOC_RESPONSE_FORMAT = json_schema_format("table_of_contents", TOC_SCHEMA)


def build_messages(doc_text: str, prompt_text: str) -> list[dict]:
    """The chat request for one document (contract in the helper brief; the fake server relies on it)."""
    return [
        {"role": "system", "content": prompt_text},
        {"role": "user", "content": DOC_OPEN + doc_text + DOC_CLOSE},
    ]


def _decode_embedded(s: str) -> tuple[Any, bool] | None:
    """The JSON object/array embedded in prose; the bool says whether anything but whitespace surrounded it.

    Prefers an object with a "sections" key, then a list of objects, then any object/array, so a stray "[1]" in
    the prose does not win over the real reply.
    """
    found: list[tuple[int, Any, bool]] = []
    for k, m in enumerate(re.finditer(r"[\[{]", s)):
        if k >= MAX_JSON_STARTS:
            break
        try:
            value, end = _DECODER.raw_decode(s, m.start())
        except json.JSONDecodeError:
            continue
        if not isinstance(value, dict | list):
            continue
        if isinstance(value, dict) and "sections" in value:
            rank = 0
        elif isinstance(value, list) and value and all(isinstance(x, dict) for x in value):
            rank = 1
        else:
            rank = 2
        found.append((rank, value, bool(s[: m.start()].strip() or s[end:].strip())))
        if rank == 0:
            break
    if not found:
        return None
    best = min(found, key=lambda f: f[0])
    return best[1], best[2]


def _as_str(v: Any) -> str:
    if v is None:
        return ""
    return v if isinstance(v, str) else str(v)


def _sections_from(value: Any) -> tuple[tuple[SectionProposal, ...], int, str]:
    """(well-formed sections, malformed count, error). An entry without a non-empty string anchor is malformed."""
    if isinstance(value, dict):
        if "sections" not in value:
            return (), 0, "JSON object has no 'sections' key"
        value = value["sections"]
    if not isinstance(value, list):
        return (), 0, f"'sections' is {type(value).__name__}, not a list"
    good: list[SectionProposal] = []
    bad = 0
    for item in value:
        anchor = item.get("anchor") if isinstance(item, dict) else None
        if not isinstance(anchor, str) or not anchor.strip():
            bad += 1
            continue
        good.append(SectionProposal(_as_str(item.get("title")), _as_str(item.get("description")), anchor))
    return tuple(good), bad, ""


def parse_reply(reply_text: str) -> Proposal:
    """Parse a model reply into a Proposal; `error` is set (outcome `unparseable`) when no usable JSON is found."""
    text = (reply_text or "").strip()
    if not text:
        return Proposal((), error="empty reply")
    note = ""
    try:
        value: Any = json.loads(text)
    except json.JSONDecodeError:
        value = None
        fence = _FENCE.search(text)
        if fence:
            try:
                value, note = json.loads(fence.group(1).strip()), "fenced"
            except json.JSONDecodeError:
                value = None
        if value is None:
            found = _decode_embedded(text)
            if found is None:
                return Proposal((), error=f"not JSON: {text[:80]!r}")
            value, note = found[0], "leading-prose"
    sections, malformed, error = _sections_from(value)
    if error:
        return Proposal((), parse_note=note, error=error, malformed=malformed)
    return Proposal(sections, parse_note=note, malformed=malformed)
