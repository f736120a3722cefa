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

from rise_batch.errors import ConfigError
from rise_batch.prompts import json_schema_format

GRADER_PROMPT = "judge_grader.txt"
FIELDS = ("extracted_final_answer", "reasoning", "correct", "confidence")
PLACEHOLDERS = ("{question}", "{response}", "{correct_answer}")
_LABEL = re.compile(
    r"^[ \t>*_#-]*(?:\*\*|__)?[ \t]*(extracted_final_answer|extracted final answer|reasoning|correct|confidence)"
    r"[ \t]*(?:\*\*|__)?[ \t]*:[ \t]*(?:\*\*|__)?",
    re.IGNORECASE | re.MULTILINE,
)
# The grader's four fields as a strict schema (structured outputs): `correct` can only be "yes" or "no" and the
# confidence only a number, so a schema-constrained grader cannot echo the prompt; parse_grader_reply reads it as
# any JSON object reply, and stays the reader for providers without structured outputs.
GRADER_SCHEMA = {
    "type": "object",
    "properties": {
        "extracted_final_answer": {"type": "string"},
        "reasoning": {"type": "string"},
        "correct": {"type": "string", "enum": ["yes", "no"]},
        "confidence": {"type": "number"},
    },
    "required": list(FIELDS),
    "additionalProperties": False,
}
GRADER_RESPONSE_FORMAT = json_schema_format("grader_verdict", GRADER_SCHEMA)
_YES = {"yes", "true"}
_NO = {"no", "false"}
_NUMBER = re.compile(r"[-+]?\d+(?:[.,]\d+)?")
_STRICT_NUMBER = re.compile(r"([-+]?\d+(?:[.,]\d+)?)\s*%?(?:\s*\(.*\))?")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation + "‘’“”–—")


class GraderVerdict(NamedTuple):
    """What could be read from one grader reply. `correct` is None exactly when `parse_error` says why the reply
    is not a grader reply (a field missing or unreadable): no verdict is ever guessed from such a reply."""

    correct: bool | None
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
    (its last text is not an answer; ARCHITECTURE.md: a budget hit without an answer is a no-answer)."""
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


def check_grader_prompt(prompt: str, name: str) -> None:
    """A grader prompt must carry the three placeholders: without one, every request would lack the question, the
    response or the reference answer, and the grader's verdicts would mean nothing."""
    absent = [p for p in PLACEHOLDERS if p not in prompt]
    if absent:
        raise ConfigError(f"grader prompt {name!r} lacks {', '.join(absent)}: a grader prompt needs {PLACEHOLDERS}")


def build_grader_messages(prompt: str, question: str, response: str, golds: Sequence[str]) -> list[dict[str, str]]:
    """One user message, the template filled by plain replacement (answers may contain braces)."""
    text = (
        prompt.replace("{question}", question.strip())
        .replace("{response}", response.strip())
        .replace("{correct_answer}", "\n".join(g.strip() for g in golds if g.strip()))
    )
    return [{"role": "user", "content": text}]


def parse_grader_reply(text: str) -> GraderVerdict:
    """Read the grader's four fields from a JSON object reply (bare or in one fenced block, as structured outputs
    send it) or from `field: value` lines (plain or **bold**). Strict on purpose: a reply that echoes the prompt
    holds the field names too ("correct: yes if the extracted answer matches ..."), so a verdict counts only when
    the last `correct` line's own value is a bare yes/no (or a JSON boolean/"yes"/"no"), and every field must be
    there and readable; anything else is a parse error, never a verdict."""
    data = _json_object(text)
    fields = _json_fields(data) if data is not None else _line_fields(text)
    missing = tuple(f for f in FIELDS if f not in fields)
    problems = [f"missing {', '.join(missing)}"] if missing else []
    correct = _verdict(fields["correct"]) if "correct" in fields else None
    if "correct" in fields and correct is None:
        problems.append(f"correct is not a bare yes/no: {_shown(fields['correct'])}")
    confidence = parse_confidence(fields.get("confidence"), strict=True)
    if "confidence" in fields and confidence is None:
        problems.append(f"confidence is not a number: {_shown(fields['confidence'])}")
    extracted = fields.get("extracted_final_answer")
    extracted = None if extracted is None else str(extracted)
    if extracted is not None and extracted.strip().lower() in ("", "none", "null", "n/a"):
        extracted = None
    return GraderVerdict(
        correct=None if problems else correct,
        extracted_final_answer=extracted,
        reasoning=str(fields.get("reasoning") or ""),
        confidence=confidence,
        parse_error="; ".join(problems) or None,
        missing=missing,
    )


def parse_confidence(value: Any, *, strict: bool = False) -> float | None:
    """A 0-100 score from '85', '85%', '**85 %**', 85 or 0.85 (a fraction written with a decimal point), clamped.
    `strict` (the grader's field): the value must BE a number, not a sentence holding one ("the confidence score
    between 0 and 100" is an echoed instruction, not a score)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number, fraction = float(value), isinstance(value, float) and 0 < value < 1
        return min(max(number * 100 if fraction else number, 0.0), 100.0) if number == number else None
    text = _first_line(value) if strict else str(value)
    found = (_STRICT_NUMBER.fullmatch if strict else _NUMBER.search)(text)
    if not found:
        return None
    raw = found.group(1 if strict else 0).replace(",", ".")
    number = float(raw)
    if "." in raw and 0 < number < 1 and "%" not in text:
        number *= 100
    return min(max(number, 0.0), 100.0)


def is_unjudged(judgment: dict[str, Any]) -> bool:
    """A judgment file that holds no verdict: recorded as unjudged, or a `correct` that is not a boolean, or (files
    of older versions) a grader reply that lacked fields or did not parse. An LLM judgment is checked against its
    own stored reply, so a verdict an older parser read out of an echoed prompt is not trusted. Such a query is
    left out of accuracy, counted apart, and graded again by the next `judge` run."""
    if judgment.get("unjudged") or judgment.get("parse_error") or judgment.get("missing_fields"):
        return True
    if not isinstance(judgment.get("correct"), bool):
        return True
    reply = judgment.get("grader_reply")
    if judgment.get("method") == "llm" and isinstance(reply, str):
        return parse_grader_reply(reply).correct is not judgment["correct"]
    return False


def reask_messages(messages: Sequence[dict[str, str]], reply: str, error: str) -> list[dict[str, str]]:
    """The one re-ask after a reply that did not follow the format: the conversation so far plus what was wrong."""
    note = (
        f"Your reply did not follow the required format ({error}). Reply again with exactly the four fields "
        "extracted_final_answer, reasoning, correct (yes or no) and confidence (a number), each on its own line "
        "starting with the field name."
    )
    return [*messages, {"role": "assistant", "content": reply}, {"role": "user", "content": note}]


def _strip_markup(value: str) -> str:
    return value.strip().strip("*_`").strip().strip("\"'").strip()


def _first_line(value: Any) -> str:
    text = _strip_markup(str(value))
    return _strip_markup(text.splitlines()[0]) if text else ""


def _shown(value: Any) -> str:
    return repr(str(value).strip()[:60])


def _verdict(value: Any) -> bool | None:
    """A bare yes/no (true/false) and nothing else on the field's first line; None for anything else."""
    if isinstance(value, bool):
        return value
    word = _first_line(value).rstrip(".!").strip().lower()
    return True if word in _YES else False if word in _NO else None


def _line_fields(text: str) -> dict[str, str]:
    """Each label at the start of a line opens a field that runs until the next label (reasoning may span lines);
    the last occurrence of a label wins (a grader that restated the instructions first is still read right)."""
    fields: dict[str, str] = {}
    matches = list(_LABEL.finditer(text))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        fields[m.group(1).lower().replace(" ", "_")] = _strip_markup(text[m.end() : end])
    return fields


def _json_object(text: str) -> dict[str, Any] | None:
    """The reply as a JSON object when the whole reply is one (bare or in a single fenced block), else None."""
    body = text.strip()
    if body.startswith("```") and body.endswith("```") and len(body) > 6:
        body = body[3:-3].strip()
        body = body[4:].strip() if body[:4].lower() == "json" else body
    if not body.startswith("{"):
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _json_fields(data: dict[str, Any]) -> dict[str, Any]:
    lowered = {str(k).lower().replace(" ", "_"): v for k, v in data.items()}
    return {k: "None" if v is None else v for k, v in lowered.items() if k in FIELDS}
