"""A reply's `usage`, checked against the engine's own count of what it sent and received (pure: no I/O).

A provider's `usage` is what it bills, but a server can omit it, send it as text (`"12"`, `"x"`), NaN, infinite,
negative, zeros or a tenth of the truth; priced as given, each of those lets a cap be passed on the real bill. The
engine counts every request body it sends and every reply it receives (llm/tokens.py: the model's tokenizer when
`bpe-openai` is installed, else one token per 4 characters). The rule:
- a usage that is missing, not numbers, negative, or whose prompt or total is less than half the engine's own count
  is replaced by the engine's count (nothing cached; a readable count above the engine's is kept), and the call is
  marked `usage_estimated`;
- otherwise it is kept, but never below the engine's count (prompt and output each at least the engine's figure)
  where that count is exact: under a dollar limit, whose reservations count every request exactly (without one,
  long texts are counted from a sample, good enough to judge a usage but not to raise it).
The engine cannot see tokens a reply does not show (a reasoning model's hidden reasoning): where usage is missing
those are not in the estimate; where usage is given they are in it.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple


class Tokens(NamedTuple):
    """Tokens one reply was billed for: input (cached ones included, as the API reports them), cached, output."""

    input: int
    cached: int
    output: int

    def as_usage(self) -> dict[str, Any]:
        """As the API's `usage` object (what a kept reply and the journal record)."""
        return {
            "prompt_tokens": self.input,
            "completion_tokens": self.output,
            "prompt_tokens_details": {"cached_tokens": self.cached},
        }


def _count(value: Any) -> int | None:
    """A token count as a provider must send it: a finite, whole, non-negative JSON number (never a string)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        return None
    return int(value) if value >= 0 else None


def read_usage(usage: Any) -> Tokens | None:
    """A reply's `usage` as Tokens, or None when it does not state both counts as numbers >= 0. A cached count that
    is not a number counts as none cached (the dearer reading); one above the prompt is cut to it."""
    if not isinstance(usage, dict):
        return None
    prompt, output = _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))
    if prompt is None or output is None:
        return None
    details = usage.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    return Tokens(prompt, min(cached or 0, prompt), output)


def checked_usage(usage: Any, engine_input: int, engine_output: int, *, floor: bool = True) -> tuple[Tokens, bool]:
    """(what a reply is billed for, whether that is the engine's own count): see the module docstring. `floor`: the
    engine's count is exact (a capped run), so a believable usage is still never taken below it; a sampled count
    (long texts scaled from their first 2 kB, +-10%) only judges whether the usage is believable."""
    told = read_usage(usage)
    if told is None or told.input * 2 < engine_input or (told.input + told.output) * 2 < engine_input + engine_output:
        if told is None:
            return Tokens(engine_input, 0, engine_output), True
        return Tokens(max(told.input, engine_input), 0, max(told.output, engine_output)), True
    if not floor:
        return told, False
    return Tokens(max(told.input, engine_input), told.cached, max(told.output, engine_output)), False
