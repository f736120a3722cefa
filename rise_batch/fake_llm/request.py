"""A parsed chat request and the responder interface: what every kind of fake traffic (agent, judge, structuring)
is given and must provide.

They sit below both the responders (agent.py, judge.py) and the chat-completions module that picks one, so a
responder can name the request type without importing the module that imports it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Protocol

from rise_batch.fake_llm.http import BadRequest
from rise_batch.fake_llm.structuring import extract_document
from rise_batch.llm.tokens import message_text


@dataclass(frozen=True)
class ChatRequest:
    body: dict[str, Any]
    model: str
    messages: list[dict[str, Any]]
    document: str | None  # the document of a structuring request
    key: str  # identifies "the same request" across retries: faults and attempt counts hang on it

    @classmethod
    def parse(cls, body: Any) -> ChatRequest:
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a JSON object")
        model, messages = body.get("model"), body.get("messages")
        if not isinstance(model, str) or not model:
            raise BadRequest("`model` is required")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise BadRequest("`messages` must be a non-empty list of message objects")
        users = [m for m in messages if m.get("role") == "user"]
        document = extract_document(message_text(users[-1])) if users else None
        basis = document if document is not None else model + "\x00" + "\x00".join(map(message_text, messages))
        key = hashlib.blake2b(basis.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
        return cls(body, model, messages, document, key)


class Responder(Protocol):
    name: str

    def matches(self, request: ChatRequest) -> bool: ...

    def respond(self, request: ChatRequest) -> dict[str, Any]:
        """The assistant message (role, content and, for agents, tool_calls)."""
        ...
