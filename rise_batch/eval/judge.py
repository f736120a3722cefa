"""Judging one trajectory: the grader prompt, the decision what needs a model call, and parsing the grader's reply.

Pure functions only (the async runner is rise_batch.eval.judge_runner), because the grader's reply is free text
from a model and every way it can come back (plain fields, **bold** Markdown fields, JSON, missing fields, odd
casing) must be pinned by fast tests. Two cases never reach a model: an empty answer is wrong by definition, and
an exact answer equal to a gold answer after normalisation is right by definition; both save judge cost and
remove judge noise where there is nothing to judge.
"""

from __future__ import annotations

import hashlib
import json
import re
import string
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

GRADER_PROMPT = "judge_grader.txt"
FIELDS = ("extracted_final_answer", "reasoning", "correct", "confidence")
_LABEL = re.compile(
    r"^[ \t>*_#-]*(?:\*\*|__)?[ \t]*(extracted_final_answer|extracted final answer|reasoning|correct|confidence)"
    r"[ \t]*(?:\*\*|__)?[ \t]*:[ \t]*(?:\*\*|__)?",
    re.IGNORECASE | re.MULTILINE,
)
_INLINE_CORRECT = re.compile(r"\bcorrect\W{0,4}:\W{0,4}(\w+)", re.IGNORECASE)
_YES = {"yes", "y", "true", "correct", "right"}
_NO = {"no", "n", "false", "incorrect", "wrong"}
_NUMBER = re.compile(r"[-+]?\d+(?:[.,]\d+)?")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation + "‘’“”–—")


class GraderVerdict(NamedTuple):
    """What could be read from one grader reply. `parse_error` is set when `correct` could not be read (the query
    then counts as wrong); `missing` lists any other field the reply left out."""

    correct: bool
    extracted_final_answer: str | None
    reasoning: str
    confidence: float | None
    parse_error: str | None = None
    missing: tuple[str, ...] = ()


def normalize_answer(text: str) -> str:
    """SQuAD-style answer normal form: NFKC, lower case, no punctuation or articles, single spaces."""
    text = unicodedata.normalize("NFKC", text).lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def is_empty_answer(trajectory: dict[str, Any]) -> bool:
    """No answer to judge: no exact answer, and either no final text or a run that ended on a budget or error
    (its last text is not an answer; DESIGN.md: a budget hit without an answer is a no-answer)."""
    if (trajectory.get("exact_answer") or "").strip():
        return False
    return trajectory.get("stop_reason") != "answered" or not (trajectory.get("final_text") or "").strip()


def trajectory_key(trajectory: dict[str, Any]) -> str:
    """What identifies a trajectory's content for the judge (config, answer, text, stop reason): a judgment keeps
    it, so a judgment made for an earlier version of the file is redone, not reused."""
    basis = json.dumps(
        [trajectory.get(k) for k in ("config_hash", "exact_answer", "final_text", "stop_reason")], ensure_ascii=False
    )
    return hashlib.blake2b(basis.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def judges(judgment: dict[str, Any], trajectory: dict[str, Any]) -> bool:
    """Does this judgment grade this trajectory (judgments without a key, e.g. hand-made ones, are trusted)?"""
    return judgment.get("trajectory_key") in (None, trajectory_key(trajectory))


def exact_match(answer: str | None, golds: Iterable[str]) -> bool:
    if not answer or not normalize_answer(answer):
        return False
    norm = normalize_answer(answer)
    return any(norm == normalize_answer(g) for g in golds if g)


def response_text(trajectory: dict[str, Any]) -> str:
    """What the grader reads: the agent's final text, or its parsed fields when the text was not kept."""
    text = (trajectory.get("final_text") or "").strip()
    if text:
        return text
    parts = [f"Exact Answer: {trajectory.get('exact_answer') or ''}"]
    if trajectory.get("confidence") is not None:
        parts.append(f"Confidence: {trajectory['confidence']}%")
    return "\n".join(parts)


def build_grader_messages(prompt: str, question: str, response: str, golds: Sequence[str]) -> list[dict[str, str]]:
    """One user message, the template filled by plain replacement (answers may contain braces)."""
    text = (
        prompt.replace("{question}", question.strip())
        .replace("{response}", response.strip())
        .replace("{correct_answer}", "\n".join(g.strip() for g in golds if g.strip()))
    )
    return [{"role": "user", "content": text}]


def parse_grader_reply(text: str) -> GraderVerdict:
    """Read the four fields from plain `field: value` lines, **bold** variants or a JSON object; the last
    readable `correct` wins (a grader that restates the instructions first is still read right)."""
    fields = _json_fields(text) or _line_fields(text)
    if "correct" not in fields:  # all fields run together on one line
        inline = _INLINE_CORRECT.findall(text)
        if inline:
            fields["correct"] = inline
    missing = tuple(f for f in FIELDS if f not in fields)
    correct: bool | None = None
    for value in reversed(fields.get("correct", [])):
        correct = _yes_no(value)
        if correct is not None:
            break
    error = None
    if correct is None:
        seen = fields.get("correct")
        error = f"unreadable correct field: {seen[-1][:80]!r}" if seen else "no correct field in the grader reply"
    extracted = _last(fields.get("extracted_final_answer"))
    if extracted is not None and extracted.strip().lower() in ("", "none", "null", "n/a"):
        extracted = None
    return GraderVerdict(
        correct=bool(correct),
        extracted_final_answer=extracted,
        reasoning=_last(fields.get("reasoning")) or "",
        confidence=parse_confidence(_last(fields.get("confidence"))),
        parse_error=error,
        missing=missing,
    )


def parse_confidence(value: Any) -> float | None:
    """A 0-100 score from '85', '85%', '**85 %**', 85 or 0.85 (a fraction written with a decimal point), clamped."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number, fraction = float(value), isinstance(value, float) and 0 < value < 1
    else:
        found = _NUMBER.search(str(value))
        if not found:
            return None
        raw = found.group().replace(",", ".")
        number = float(raw)
        fraction = "." in raw and 0 < number < 1 and "%" not in str(value)
    if fraction:
        number *= 100
    return min(max(number, 0.0), 100.0)


def _strip_markup(value: str) -> str:
    return value.strip().strip("*_`").strip().strip("\"'").strip()


def _yes_no(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    words = re.findall(r"[a-z]+", str(value).lower())
    if not words:
        return None
    if words[0] in _YES:
        return True
    if words[0] in _NO:
        return False
    return None


def _last(values: list[Any] | None) -> str | None:
    if not values:
        return None
    value = values[-1]
    return value if isinstance(value, str) else json.dumps(value) if not isinstance(value, int | float) else str(value)


def _line_fields(text: str) -> dict[str, list[str]]:
    """Each label starts a field that runs until the next label (reasoning may span lines)."""
    fields: dict[str, list[str]] = {}
    matches = list(_LABEL.finditer(text))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        name = m.group(1).lower().replace(" ", "_")
        fields.setdefault(name, []).append(_strip_markup(text[m.end() : end]))
    return fields


def _json_fields(text: str) -> dict[str, list[Any]]:
    """A JSON object reply (bare or fenced) with at least a `correct` key; {} when it is not one."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return {}
    try:
        data = json.loads(text[start : end + 1])
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    lowered = {str(k).lower().replace(" ", "_"): v for k, v in data.items()}
    if "correct" not in lowered:
        return {}
    return {k: ["None" if v is None else v] for k, v in lowered.items() if k in FIELDS}
