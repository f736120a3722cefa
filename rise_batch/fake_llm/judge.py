"""The fake server's grader: answers a judge request (prompts/judge_grader.txt) the way a careful grader would.

It reads the response's exact answer and the reference answers out of the prompt, calls the answer correct when,
after SQuAD-style normalisation, it equals a reference or contains one as whole words ("Paris, France" for
"Paris"), and replies in the grader's four-field format. The reply's *shape* varies deterministically with the
request (plain lines, **bold** fields, a JSON object, capitalised values), so an end-to-end run exercises every
form the judge's parser accepts, while the verdict itself depends only on the answers. A request with a JSON
`response_format` (structured outputs) always gets the JSON object, its confidence a number, as the schema says.

A misbehaving grader can be rehearsed too (`JudgeResponder(reply=...)`, `rise-batch fake-llm --judge-reply`):
`echo` answers with text that is not a grader reply but repeats the prompt (its field names and "correct: yes if
..." included), `truncated` with a grader reply cut before its last field, as a token limit would; the `-once`
forms misbehave on the first ask only and answer a re-ask properly.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from rise_batch.eval.judge import normalize_answer
from rise_batch.fake_llm.schema import wants_json
from rise_batch.llm.tokens import message_text

_EXACT = re.compile(r"exact[ _]answer\W{0,4}:\W{0,4}(.+)", re.IGNORECASE)
_CONFIDENCE = re.compile(r"confidence\W{0,4}:\W{0,4}(\d+(?:\.\d+)?)", re.IGNORECASE)
STYLES = ("plain", "bold", "json", "capitalised")
JUDGE_REPLIES = ("grader", "echo", "truncated", "echo-once", "truncated-once")


def _between(text: str, open_tag: str, close_tag: str, *, last: bool = False) -> str | None:
    start = text.rfind(open_tag) if last else text.find(open_tag)
    if start < 0:
        return None
    start += len(open_tag)
    end = text.find(close_tag, start) if last else text.rfind(close_tag, start)
    return text[start:end] if end >= 0 else None


def parse_grader_request(text: str) -> tuple[str, list[str]] | None:
    """(response, reference answers) of a grader prompt, or None when the text is not one."""
    if "extracted_final_answer" not in text:
        return None
    golds = _between(text, "<correct_answer>\n", "\n</correct_answer>", last=True)
    if golds is None:
        return None
    head = text[: text.rfind("<correct_answer>\n")]
    response = _between(head, "<response>\n", "\n</response>")
    if response is None:
        return None
    return response, [g.strip() for g in golds.splitlines() if g.strip()]


def final_answer(response: str) -> str | None:
    found = _EXACT.findall(response)
    if found:
        answer = found[-1].strip().strip("*_` ").strip()
        return answer or None
    lines = [ln.strip() for ln in response.splitlines() if ln.strip()]
    return lines[-1] if lines else None


def answer_matches(answer: str | None, golds: list[str]) -> bool:
    if not answer:
        return False
    norm = f" {normalize_answer(answer)} "
    return any(g and (norm.strip() == g or f" {g} " in norm) for g in map(normalize_answer, golds))


def grade(text: str, as_json: bool = False) -> str:
    """The grader's reply to a grader prompt (deterministic in the prompt text); `as_json`: the schema's object."""
    parsed = parse_grader_request(text)
    if parsed is None:
        return "extracted_final_answer: None\nreasoning: the request could not be read.\ncorrect: no\nconfidence: 0"
    response, golds = parsed
    answer = final_answer(response)
    correct = answer_matches(answer, golds)
    found = _CONFIDENCE.findall(response)
    confidence = found[-1] if found else "100"
    reasoning = (
        f"The extracted answer {'matches' if correct else 'does not match'} the reference answer {golds[0]!r}."
        if golds
        else "There is no reference answer."
    )
    shown = answer if answer is not None else "None"
    yes_no = "yes" if correct else "no"
    style = STYLES[int(hashlib.blake2b(text.encode(), digest_size=2).hexdigest(), 16) % len(STYLES)]
    if as_json or style == "json":  # under the schema the confidence is a number, as the schema says
        score: str | float = float(confidence) if as_json else confidence
        obj = {"extracted_final_answer": shown, "reasoning": reasoning, "correct": yes_no, "confidence": score}
        return json.dumps(obj)
    if style == "bold":
        rows = [("extracted_final_answer", shown), ("reasoning", reasoning), ("correct", yes_no)]
        return "\n\n".join(f"**{k}:** {v}" for k, v in [*rows, ("confidence", f"{confidence}%")])
    if style == "capitalised":
        yes_no = yes_no.capitalize()
    return f"extracted_final_answer: {shown}\n\nreasoning: {reasoning}\n\ncorrect: {yes_no}\n\nconfidence: {confidence}"


def misgrade(mode: str, prompt: str, as_json: bool = False) -> str:
    """What a misbehaving grader sends instead of `grade(prompt)`: an echo of the prompt, or a truncated reply
    (under a schema, the JSON object cut short, as a token limit cuts a constrained reply)."""
    if mode.startswith("echo"):
        return "I am not able to grade this here. This is the task I was given:\n\n" + prompt
    reply = grade(prompt, as_json)
    cut = reply.lower().rfind("confidence")  # the last field: a reply cut by a token limit loses it first
    return reply[: cut if cut > 0 else len(reply) // 2].rstrip(' \n*"')


class JudgeResponder:
    name = "judge"

    def __init__(self, reply: str = "grader") -> None:
        if reply not in JUDGE_REPLIES:
            raise ValueError(f"judge reply must be one of {', '.join(JUDGE_REPLIES)}, got {reply!r}")
        self.reply = reply

    def matches(self, request: Any) -> bool:
        return _grader_prompt(request) is not None

    def respond(self, request: Any) -> dict[str, Any]:
        """The grade of the conversation's grader prompt (its first user message: a re-ask keeps it first)."""
        prompt = _grader_prompt(request) or ""
        reask = any(m.get("role") == "assistant" for m in request.messages)
        good = self.reply == "grader" or (reask and self.reply.endswith("-once"))
        as_json = wants_json(request.body)
        content = grade(prompt, as_json) if good else misgrade(self.reply, prompt, as_json)
        return {"role": "assistant", "content": content}


def _grader_prompt(request: Any) -> str | None:
    users = [message_text(m) for m in request.messages if m.get("role") == "user"]
    return users[0] if users and parse_grader_request(users[0]) is not None else None
