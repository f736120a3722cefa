"""The context size a server says it has, and what of a document fits in it.

A self-hosted server has a context far smaller than a hosted model's, and fills it with the prompt and the reply
together: llama.cpp answers a prompt over its slot's context with HTTP 400, and a reply that fills the slot while it
is generated with HTTP 500 "Context size has been exceeded". Both fail the same way every time, so rather than
paying for them the structuring job asks the server once (llama.cpp's `GET /props`: `default_generation_settings.n_ctx`,
the context of one slot) and cuts longer documents before they are sent, as `--max-input-tokens` does. A server that
does not say (OpenAI, vLLM, a proxy) is not asked again and nothing is cut; a context overflow it answers is still
recorded at once, never retried (llm/retry.py).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

from rise_batch.config import LLMConfig

PROBE_TIMEOUT_S = 5.0
# The server's tokenizer is rarely the one we count with (a llama.cpp model's is unknown here: chars/4), so a document
# is cut to this share of the room left, and the chat template's own tokens are allowed for.
TOKENIZER_SLACK = 0.8
TEMPLATE_TOKENS = 64
MIN_DOCUMENT_TOKENS = 256  # less room than this for a document: the settings are wrong, not the document


def server_context(config: LLMConfig, timeout_s: float = PROBE_TIMEOUT_S) -> tuple[int, str] | None:
    """(tokens of one request's context, the URL that said so), or None when the server does not say."""
    if not config.base_url:
        return None  # OpenAI's API: no /props, and the model's window is far past what structuring sends
    root = config.base_url.rstrip("/")
    root = root[: -len("/v1")] if root.endswith("/v1") else root
    url = root + "/props"
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    key = os.environ.get(config.api_key_env)
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:  # noqa: S310 - the user's own endpoint
            body: Any = json.loads(answer.read(1_000_000))
    except (OSError, ValueError, urllib.error.URLError):
        return None
    n_ctx = context_of(body)
    return (n_ctx, url) if n_ctx is not None else None


def context_of(props: Any) -> int | None:
    """The slot's context in a `/props` body (llama.cpp: `default_generation_settings.n_ctx`; older: `n_ctx`)."""
    if not isinstance(props, dict):
        return None
    settings = props.get("default_generation_settings")
    for where in (settings, props):
        value = where.get("n_ctx") if isinstance(where, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def document_budget(n_ctx: int, max_output_tokens: int, prompt_tokens: int) -> int:
    """Tokens of a document that fit beside the prompt and a reply of `max_output_tokens` (may be <= 0)."""
    room = n_ctx - max_output_tokens - prompt_tokens - TEMPLATE_TOKENS
    return int(room * TOKENIZER_SLACK)
