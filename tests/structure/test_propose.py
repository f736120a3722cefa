"""Reply parsing and request building for the llm backend."""

from __future__ import annotations

import json

import pytest

from rise_batch.prompts import load_prompt, prompt_hash
from rise_batch.structure.propose import build_messages, parse_reply
from rise_batch.types import SectionProposal

GOOD = {"sections": [{"title": "Early life", "description": "Born in Lyon.", "anchor": "He was born in Lyon"}]}
GOOD_TEXT = json.dumps(GOOD)
ONE = (SectionProposal("Early life", "Born in Lyon.", "He was born in Lyon"),)


def test_build_messages_contract() -> None:
    msgs = build_messages("Doc text\nline 2", "SYSTEM PROMPT")
    assert msgs == [
        {"role": "system", "content": "SYSTEM PROMPT"},
        {"role": "user", "content": "<document>\nDoc text\nline 2\n</document>"},
    ]
    user = msgs[-1]["content"]
    assert user[user.index("<document>\n") + 11 : user.rindex("\n</document>")] == "Doc text\nline 2"


def test_plain_json() -> None:
    p = parse_reply(GOOD_TEXT)
    assert (p.sections, p.parse_note, p.error, p.malformed) == (ONE, "", "", 0)


@pytest.mark.parametrize(
    "reply",
    [
        "```json\n" + GOOD_TEXT + "\n```",
        "```\n" + GOOD_TEXT + "\n```",
        "Here is the table of contents:\n```json\n" + json.dumps(GOOD, indent=2) + "\n```\nHope this helps.",
    ],
)
def test_fenced(reply: str) -> None:
    p = parse_reply(reply)
    assert (p.sections, p.parse_note, p.error) == (ONE, "fenced", "")


@pytest.mark.parametrize(
    "reply",
    [
        "Sure! Here are the sections: " + GOOD_TEXT,
        GOOD_TEXT + "\nLet me know if you need more.",
        "See note [1]. " + GOOD_TEXT,  # a stray bracket in the prose does not win over the real object
    ],
)
def test_leading_or_trailing_prose(reply: str) -> None:
    p = parse_reply(reply)
    assert (p.sections, p.parse_note, p.error) == (ONE, "leading-prose", "")


def test_bare_list_accepted() -> None:
    p = parse_reply(json.dumps(GOOD["sections"]))
    assert (p.sections, p.error) == (ONE, "")


@pytest.mark.parametrize(
    "reply",
    ["", "   ", "I cannot help with that.", "{not json}", '{"sections": "none"}', '{"toc": []}', "```json\n{```"],
)
def test_unparseable(reply: str) -> None:
    p = parse_reply(reply)
    assert p.error and p.sections == ()


def test_malformed_entries_dropped_and_counted() -> None:
    reply = {
        "sections": [
            {"title": "No anchor", "description": "x"},
            {"title": "Empty anchor", "anchor": "  "},
            {"title": "Numeric anchor", "anchor": 12},
            "not an object",
            {"anchor": "Only an anchor here"},
            {"title": 5, "description": None, "anchor": "Typed oddly"},
        ]
    }
    p = parse_reply(json.dumps(reply))
    assert p.malformed == 4 and not p.error
    assert p.sections == (SectionProposal("", "", "Only an anchor here"), SectionProposal("5", "", "Typed oddly"))


def test_empty_sections_is_not_an_error() -> None:
    p = parse_reply('{"sections": []}')
    assert (p.sections, p.error, p.malformed) == ((), "", 0)


def test_prompt_file_demands_the_reply_schema() -> None:
    text = load_prompt("structure_toc")
    assert text == load_prompt("structure_toc.txt")
    assert '{"sections": [{"title": "...", "description": "...", "anchor": "..."}]}' in text
    assert "JSON" in text and "2 to 7 words" in text and "6 to 12" in text and "10 to 25" in text
    assert len(prompt_hash(text)) == 16 and prompt_hash(text) != prompt_hash(text + " ")
    with pytest.raises(FileNotFoundError, match="structure_toc.txt"):
        load_prompt("no_such_prompt")
