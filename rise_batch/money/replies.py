"""Replies that were paid for, kept by the sha256 of their request, so that nothing is paid twice.

A resumed trajectory, judgment or structuring call sends the same request body as the run that was cut (the agent's
tools are deterministic over the same workspace, the prompts and documents are the same): the LLM client looks the
body's hash up here first and, when a kept reply exists, answers from it without an HTTP request and without spend.
The rule is plain: **a request whose kept reply exists is answered from it**, within a run as across resumes. Two
identical requests are one request (the same query sent twice on purpose gets the same answer; sampling several
answers needs requests that differ, e.g. a seed in the prompt). A reply that was unusable (not JSON, no choices) is
never kept, so the retry after it goes to the server; one its caller could not use (a judgment left `unjudged`) is
forgotten by the caller (`LLMClient.forget`), so the next run buys a fresh one, as it did before replies were kept.

Layout: `OUT/spend/replies/<sha[:2]>/<sha>.json` holding `{"completion": the API's reply object}`, whose `usage` is
what was billed for it (the engine's own count when the server's was not believable). Written whole (atomically, or
one PUT) before the reply is used, so a kill never leaves half a reply to be replayed.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import orjson

from rise_batch.io import write_bytes_atomic
from rise_batch.money.journal import journal_dir
from rise_batch.storage import AnyPath, ObjectPath

REPLIES = "replies"


def request_sha256(request: dict[str, Any]) -> str:
    """The key of a request body: its JSON with sorted keys (the same body, whatever order its dict was built in)."""
    return hashlib.sha256(orjson.dumps(request, option=orjson.OPT_SORT_KEYS)).hexdigest()


class ReplyStore:
    """The kept replies of one output directory."""

    def __init__(self, out: str | os.PathLike | AnyPath) -> None:
        self.dir = journal_dir(out) / REPLIES
        # a directory with no kept reply when this store was made (a first run) is not asked for each request:
        # what this run keeps answers a later run
        self.any = isinstance(self.dir, ObjectPath) or self.dir.is_dir()

    def _path(self, sha256: str) -> AnyPath:
        return self.dir / sha256[:2] / f"{sha256}.json"

    def get(self, sha256: str) -> dict[str, Any] | None:
        """The kept reply of this request, or None (none kept, or one that cannot be read: then it is bought)."""
        if not self.any:
            return None
        path = self._path(sha256)
        try:
            if not isinstance(path, ObjectPath) and not path.is_file():
                return None
            data = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return None
        completion = data.get("completion") if isinstance(data, dict) else None
        return completion if isinstance(completion, dict) and completion.get("choices") else None

    def forget(self, sha256: str) -> None:
        """Drop a kept reply, so that the request is bought again (a grader reply that could not be used)."""
        self._path(sha256).unlink(missing_ok=True)

    def put(self, sha256: str, completion: dict[str, Any]) -> None:
        path = self._path(sha256)
        data = orjson.dumps({"completion": completion})
        if not isinstance(path, ObjectPath):
            path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(path, data)
