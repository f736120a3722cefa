"""A tokenizer-free token estimate, shared by the rate limiter (reservations) and the fake server (usage).

Reservations only need to be close: the limiter trues every lease up with the usage the reply reports. About four
characters per token holds for English prose with OpenAI's tokenizers; a small per-message overhead covers roles
and separators.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 4


def approx_tokens(text: str) -> int:
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def message_text(message: Mapping[str, Any]) -> str:
    """The text a message contributes; structured content parts are counted by their JSON."""
    content = message.get("content")
    if content is None:
        return ""
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


def approx_message_tokens(messages: Iterable[Mapping[str, Any]]) -> int:
    return sum(approx_tokens(message_text(m)) + MESSAGE_OVERHEAD_TOKENS for m in messages)
