"""Structuring backends behind one interface, and the one path from a Proposal to a checkpoint row + document.

Both backends end in `finish()`: validate the proposal's anchors, classify the outcome, render. So whatever the
tests prove about the heuristic's output format holds for the LLM's, and a checkpoint row alone (`sections_json`
holds validated lines, not anchors) is enough to re-render a document later (`render_result`, used by
materialize) without calling anything again.

The LLM backend never raises for a bad document: the transport has already retried, so a request that fails for
good becomes an `error` row and the run moves on. A transient failure (llm.retry.is_transient: connection refused,
5xx, a lost rate limiter, after every attempt) is not the document's outcome: it is raised, and the shard leaves the
document for a resume. Unparseable replies and replies whose anchors all fail get one
re-ask with feedback (a fresh sample usually fixes both); the better attempt is kept and the usage of both paid.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import NamedTuple

from rise_batch.llm.retry import is_transient
from rise_batch.llm.tokens import TokenCounter
from rise_batch.structure.anchors import LOCATED, validate_anchors
from rise_batch.structure.heuristic import is_too_short, propose_heuristic
from rise_batch.structure.propose import DOC_CLOSE, DOC_OPEN, build_messages, parse_reply
from rise_batch.structure.render import clean_description, clean_title, render
from rise_batch.types import OUTCOME_TOC, AnchorOutcome, Doc, DocResult, Proposal, Reply, Section

Chat = Callable[[list[dict]], Awaitable[Reply]]
REASK_OUTCOMES = ("unparseable", "all-failed")
_FEEDBACK = {
    "unparseable": "Your reply was not a JSON object of the required shape. Reply again, with only the JSON object "
    '{"sections": [{"title": ..., "description": ..., "anchor": ...}]} for the document below.',
    "all-failed": "None of your anchors occurs in the document. Each anchor must be 6 to 12 words copied character "
    "for character from the beginning of the line where its section starts. Reply again, with only the JSON "
    "object, for the document below.",
}


class Usage(NamedTuple):
    """What a document's model calls cost, summed over attempts."""

    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    attempts: int = 0

    def add(self, r: Reply) -> Usage:
        return Usage(
            self.input_tokens + r.input_tokens,
            self.cached_input_tokens + r.cached_input_tokens,
            self.output_tokens + r.output_tokens,
            self.cost_usd + r.cost_usd,
            self.attempts + 1,
        )


class Evaluation(NamedTuple):
    """A proposal checked against its document: outcome, validated sections, per-anchor outcomes."""

    outcome: str
    sections: list[Section]
    anchors: list[AnchorOutcome]
    proposal: Proposal


NO_USAGE = Usage()


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def evaluate(text: str, proposal: Proposal, empty_outcome: str = "llm-empty") -> Evaluation:
    """Validate anchors and classify: unparseable / `empty_outcome` / all-failed / toc."""
    if proposal.error:
        return Evaluation("unparseable", [], [], proposal)
    if not proposal.sections:
        return Evaluation("all-failed" if proposal.malformed else empty_outcome, [], [], proposal)
    anchors = validate_anchors(text, [s.anchor for s in proposal.sections])
    sections: list[Section] = []
    for sp, a in zip(proposal.sections, anchors, strict=True):
        if a.status in LOCATED:
            sections.append(Section(clean_title(sp.title, len(sections)), clean_description(sp.description), a.line))
    return Evaluation(OUTCOME_TOC if sections else "all-failed", sections, anchors, proposal)


def finish(
    doc: Doc,
    run_hash: str,
    ev: Evaluation,
    tier: str,
    usage: Usage = NO_USAGE,
    reasks: int = 0,
    note: str = "",
    error: str = "",
    constrained: bool = False,
) -> tuple[DocResult, str]:
    """The checkpoint row and the rendered text (original text when there is no TOC). `constrained`: the reply the
    row was made from was schema-constrained (structured outputs)."""
    status = Counter(a.status for a in ev.anchors)
    dropped = {k: status[k] for k in ("not-found", "out-of-order", "duplicate") if status[k]}
    if ev.proposal.malformed:
        dropped["malformed"] = ev.proposal.malformed
    notes = ",".join(x for x in (ev.proposal.parse_note, note) if x)
    row = DocResult(
        docid=doc.docid,
        content_hash=content_hash(doc.text),
        run_hash=run_hash,
        outcome=ev.outcome,
        sections_json=json.dumps([[s.title, s.description, s.line] for s in ev.sections], ensure_ascii=False),
        anchors_proposed=len(ev.proposal.sections) + ev.proposal.malformed,
        anchors_exact=status["exact"],
        anchors_normalized=status["normalized"],
        anchors_prefix=status["prefix"],
        anchors_dropped_json=json.dumps(dropped, sort_keys=True),
        input_tokens=usage.input_tokens,
        cached_input_tokens=usage.cached_input_tokens,
        output_tokens=usage.output_tokens,
        cost_usd=usage.cost_usd,
        attempts=usage.attempts,
        reasks=reasks,
        parse_note=notes,
        tier=tier,
        error=error or ev.proposal.error,
        schema_constrained=constrained,
    )
    return row, (render(doc.text, ev.sections) if ev.sections else doc.text)


def sections_of(result: DocResult) -> list[Section]:
    return [Section(t, d, int(line)) for t, d, line in json.loads(result.sections_json or "[]")]


def render_result(text: str, result: DocResult) -> str:
    """Re-render a document from its checkpoint row; refuses a row made from different text."""
    if result.outcome != OUTCOME_TOC:
        return text
    if result.content_hash and result.content_hash != content_hash(text):
        raise ValueError(f"checkpoint row for {result.docid!r} was made from different text (content hash)")
    return render(text, sections_of(result))


def model_input(
    text: str, max_chars: int, max_tokens: int | None = None, counter: TokenCounter | None = None
) -> tuple[str, str]:
    """The text the model sees: cut at a line break under max_chars and, with `max_tokens`, under that many tokens
    of `counter` (the model's tokenizer: what is billed), and the note ("input-truncated") that records the cut in
    the row; anchors past a cut cannot exist. Shared with `plan`, which must price what is sent."""
    sent = text
    if len(sent) > max_chars:
        cut = sent.rfind("\n", 0, max_chars)
        sent = sent[: cut if cut > 0 else max_chars]
    if max_tokens is not None and counter is not None:
        prefix = counter.cut(sent, max_tokens)
        if len(prefix) < len(sent):
            cut = prefix.rfind("\n")
            sent = prefix[:cut] if cut > 0 else prefix
    return sent, ("input-truncated" if len(sent) < len(text) else "")


def _too_short(doc: Doc, run_hash: str, tier: str) -> tuple[DocResult, str]:
    return finish(doc, run_hash, Evaluation("too-short", [], [], Proposal(())), tier)


class HeuristicBackend:
    """Offline, free, deterministic: the embedded default."""

    name = "heuristic"

    def structure_sync(self, doc: Doc, run_hash: str) -> tuple[DocResult, str]:
        if is_too_short(doc.text):
            return _too_short(doc, run_hash, self.name)
        return finish(doc, run_hash, evaluate(doc.text, propose_heuristic(doc.text), "too-short"), self.name)

    async def structure(self, doc: Doc, run_hash: str) -> tuple[DocResult, str]:
        return self.structure_sync(doc, run_hash)


def _better(new: Evaluation, old: Evaluation) -> bool:
    return len(new.sections) > len(old.sections) or (old.outcome == "unparseable" and new.outcome != "unparseable")


class LLMBackend:
    """Any `chat(messages) -> Reply` coroutine proposes; validation and rendering are shared with the heuristic."""

    name = "llm"

    def __init__(
        self,
        chat: Chat,
        prompt_text: str,
        reask: bool = True,
        max_input_chars: int = 200_000,
        max_input_tokens: int | None = None,
        counter: TokenCounter | None = None,
    ) -> None:
        """`max_input_tokens` cuts with `counter` (the model's: llm.tokens.counter_for), else chars/4."""
        self.chat = chat
        self.prompt_text = prompt_text
        self.reask = reask
        self.max_input_chars = max_input_chars
        self.max_input_tokens = max_input_tokens
        self.counter = counter or TokenCounter("chars/4")

    def _input(self, text: str) -> tuple[str, str]:
        return model_input(text, self.max_input_chars, self.max_input_tokens, self.counter)

    async def structure(self, doc: Doc, run_hash: str) -> tuple[DocResult, str]:
        if is_too_short(doc.text):
            return _too_short(doc, run_hash, self.name)
        sent, note = self._input(doc.text)
        messages = build_messages(sent, self.prompt_text)
        usage = Usage()
        try:
            reply = await self.chat(messages)
        except Exception as e:  # the transport already retried: this document is an error row, not a crash
            if is_transient(e):
                raise
            if getattr(e, "paid", None) is not None:  # unusable replies it was billed for
                usage = usage.add(e.paid)  # type: ignore[attr-defined]
            return finish(doc, run_hash, Evaluation("error", [], [], Proposal(())), self.name, usage, 0, note, _msg(e))
        usage = usage.add(reply)
        ev = evaluate(doc.text, parse_reply(reply.text))
        reasks, error, constrained = 0, "", reply.constrained
        if self.reask and ev.outcome in REASK_OUTCOMES:
            reasks = 1
            again = [*messages, *_reask_turns(reply.text, ev.outcome, sent)]
            try:
                reply2 = await self.chat(again)
                usage = usage.add(reply2)
                ev2 = evaluate(doc.text, parse_reply(reply2.text))
                if _better(ev2, ev):
                    ev, constrained = ev2, reply2.constrained
            except Exception as e:
                error = "re-ask failed: " + _msg(e)
        return finish(doc, run_hash, ev, self.name, usage, reasks, note, error, constrained)


def error_result(doc: Doc, run_hash: str, tier: str, error: str) -> tuple[DocResult, str]:
    """An `error` row for a document no call could structure (the message says why), its text left as it is."""
    return finish(doc, run_hash, Evaluation("error", [], [], Proposal(())), tier, error=error[:500])


def _reask_turns(previous: str, outcome: str, sent: str) -> Sequence[dict]:
    """The failed answer plus feedback; the document is repeated so the last user turn is self-contained."""
    return (
        {"role": "assistant", "content": previous[:4000]},
        {"role": "user", "content": _FEEDBACK[outcome] + "\n" + DOC_OPEN + sent + DOC_CLOSE},
    )


def _msg(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"[:500]
