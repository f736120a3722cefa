"""Both backends end to end on every sample document; the llm one driven by a scripted chat coroutine."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable

import pytest

from rise_batch.structure.anchors import body_start_line
from rise_batch.structure.backends import HeuristicBackend, LLMBackend, content_hash, render_result, sections_of
from rise_batch.structure.propose import DOC_CLOSE, DOC_OPEN
from rise_batch.types import Doc, DocResult, Reply

from .helpers import check_structure

PROMPT = "You structure documents. Reply with JSON only."


def document_of(messages: list[dict]) -> str:
    """What the project's fake server does: the document is in the LAST user message, between the tags."""
    user = [m for m in messages if m["role"] == "user"][-1]["content"]
    return user[user.index(DOC_OPEN) + len(DOC_OPEN) : user.rindex(DOC_CLOSE)]


def anchors_from(text: str, every: int = 6) -> list[dict]:
    """A well-behaved model: every few paragraphs, the first 8 words of a body line, copied verbatim."""
    lines = text.split("\n")
    starts = [i for i in range(body_start_line(text), len(lines)) if len(lines[i].split()) >= 8]
    out = []
    for k, i in enumerate(starts[::every]):
        words = list(re.finditer(r"\S+", lines[i]))[:8]
        anchor = lines[i][words[0].start() : words[-1].end()]
        out.append({"title": f"Part {k}", "description": f"About part {k}.", "anchor": anchor})
    return out


def good(messages: list[dict]) -> str:
    return json.dumps({"sections": anchors_from(document_of(messages))})


class Script:
    """A chat coroutine answering from a list of reply makers, recording every request."""

    def __init__(self, *makers: Callable[[list[dict]], str]) -> None:
        self.makers = list(makers)
        self.calls: list[list[dict]] = []

    async def __call__(self, messages: list[dict]) -> Reply:
        self.calls.append(messages)
        make = self.makers[min(len(self.calls), len(self.makers)) - 1]
        return Reply(make(messages), input_tokens=100, cached_input_tokens=40, output_tokens=20, cost_usd=0.001)


def run(backend, doc: Doc) -> tuple[DocResult, str]:
    return asyncio.run(backend.structure(doc, "run1"))


def check_row(doc: Doc, row: DocResult, rendered: str) -> None:
    secs = sections_of(row)
    check_structure(doc.text, rendered, secs)
    assert render_result(doc.text, row) == rendered
    assert row.content_hash == content_hash(doc.text) and row.run_hash == "run1"
    located = row.anchors_exact + row.anchors_normalized + row.anchors_prefix
    assert located == len(secs) and (row.outcome == "toc") == (len(secs) > 0)
    assert located + sum(json.loads(row.anchors_dropped_json).values()) == row.anchors_proposed


def test_heuristic_backend_on_every_sample_doc(sample_docs) -> None:
    backend = HeuristicBackend()
    assert backend.name == "heuristic"
    for doc in sample_docs:
        row, rendered = run(backend, doc)
        check_row(doc, row, rendered)
        assert row.outcome == "toc" and row.tier == "heuristic" and row.attempts == 0 and row.cost_usd == 0


def test_llm_backend_on_every_sample_doc(sample_docs) -> None:
    chat = Script(good)
    backend = LLMBackend(chat, PROMPT)
    for doc in sample_docs:
        row, rendered = run(backend, doc)
        check_row(doc, row, rendered)
        assert (row.outcome, row.tier, row.attempts, row.reasks) == ("toc", "llm", 1, 0)
        assert row.anchors_exact == row.anchors_proposed > 0
        assert (row.input_tokens, row.cached_input_tokens, row.output_tokens) == (100, 40, 20)
    assert len(chat.calls) == len(sample_docs)
    assert all(c[0] == {"role": "system", "content": PROMPT} for c in chat.calls)  # one cacheable prefix


@pytest.mark.parametrize(
    ("wrap", "note"),
    [
        (lambda s: "```json\n" + s + "\n```", "fenced"),
        (lambda s: "Here is the table of contents you asked for:\n" + s, "leading-prose"),
    ],
)
def test_tolerated_replies_are_noted(sample_docs, wrap, note: str) -> None:
    doc = sample_docs[3]
    row, rendered = run(LLMBackend(Script(lambda m: wrap(good(m))), PROMPT), doc)
    check_row(doc, row, rendered)
    assert (row.outcome, row.parse_note, row.reasks) == ("toc", note, 0)


def test_garbage_then_reask_succeeds(sample_docs) -> None:
    doc = sample_docs[5]
    chat = Script(lambda m: "I am sorry, I cannot produce JSON today.", good)
    row, rendered = run(LLMBackend(chat, PROMPT), doc)
    check_row(doc, row, rendered)
    assert (row.outcome, row.attempts, row.reasks) == ("toc", 2, 1)
    assert (row.input_tokens, row.output_tokens, row.cost_usd) == (200, 40, pytest.approx(0.002))
    second = chat.calls[1]
    assert second[:2] == chat.calls[0]  # the cached prefix is kept
    assert second[2] == {"role": "assistant", "content": "I am sorry, I cannot produce JSON today."}
    assert document_of(second) == doc.text  # the last user turn is self-contained


def test_garbage_twice_is_unparseable(sample_docs) -> None:
    doc = sample_docs[5]
    row, rendered = run(LLMBackend(Script(lambda m: "no json here"), PROMPT), doc)
    assert (row.outcome, row.attempts, row.reasks, rendered) == ("unparseable", 2, 1, doc.text)
    assert row.error.startswith("not JSON")
    check_row(doc, row, rendered)


def test_all_failed_anchors_reask_and_no_reask(sample_docs) -> None:
    doc = sample_docs[7]
    bad = json.dumps({"sections": [{"title": "X", "description": "Y", "anchor": "words that are not in the text"}]})
    row, _ = run(LLMBackend(Script(lambda m: bad, good), PROMPT), doc)
    assert (row.outcome, row.reasks, row.attempts) == ("toc", 1, 2)
    row, rendered = run(LLMBackend(Script(lambda m: bad), PROMPT, reask=False), doc)
    assert (row.outcome, row.reasks, row.attempts, rendered) == ("all-failed", 0, 1, doc.text)
    assert json.loads(row.anchors_dropped_json) == {"not-found": 1}


def test_empty_reply_is_llm_empty_without_reask(sample_docs) -> None:
    chat = Script(lambda m: '{"sections": []}')
    row, rendered = run(LLMBackend(chat, PROMPT), sample_docs[0])
    assert (row.outcome, row.attempts, rendered) == ("llm-empty", 1, sample_docs[0].text)


def test_transport_failure_is_an_error_row(sample_docs) -> None:
    async def broken(messages: list[dict]) -> Reply:
        raise ConnectionError("upstream closed the connection")

    doc = sample_docs[0]
    row, rendered = run(LLMBackend(broken, PROMPT), doc)
    assert (row.outcome, rendered) == ("error", doc.text)
    assert "ConnectionError: upstream closed" in row.error

    calls = 0

    async def flaky(messages: list[dict]) -> Reply:
        nonlocal calls
        calls += 1
        if calls == 1:
            return Reply("garbage", input_tokens=10)
        raise TimeoutError("deadline")

    row, _ = run(LLMBackend(flaky, PROMPT), doc)
    assert (row.outcome, row.attempts, row.input_tokens) == ("unparseable", 1, 10)
    assert row.error.startswith("re-ask failed: TimeoutError")


def test_too_short_never_calls_the_model() -> None:
    chat = Script(good)
    doc = Doc("d1", "---\ntitle: t\n---\nA stub article.\n")
    for backend in (LLMBackend(chat, PROMPT), HeuristicBackend()):
        row, rendered = run(backend, doc)
        assert (row.outcome, rendered, row.attempts) == ("too-short", doc.text, 0)
    assert chat.calls == []


def test_long_input_is_truncated_at_a_line_break(sample_docs) -> None:
    doc = max(sample_docs, key=lambda d: len(d.text))
    chat = Script(good)
    row, rendered = run(LLMBackend(chat, PROMPT, max_input_chars=5000), doc)
    seen = document_of(chat.calls[0])
    assert len(seen) <= 5000 and doc.text.startswith(seen + "\n")
    assert row.outcome == "toc" and "input-truncated" in row.parse_note
    check_row(doc, row, rendered)


def test_render_result_refuses_other_text(sample_docs) -> None:
    doc = sample_docs[0]
    row, _ = run(HeuristicBackend(), doc)
    with pytest.raises(ValueError, match="content hash"):
        render_result(doc.text + "changed", row)
