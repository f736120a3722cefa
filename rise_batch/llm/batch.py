"""The OpenAI Batch API's file formats, as pure functions: request lines in, packed files out; result lines parsed.

Kept apart from the code that talks to the API (rise_batch.llm.batch_runner) so the limits that make a batch
refused outright (50,000 requests and 200 MB per input file, unique `custom_id`s, one endpoint) are enforced and
tested without a network, and so a result file read back from disk after a crash means exactly what it meant when
it was first downloaded.

Result lines come from two files: the output file (requests that got an HTTP response, normally 200) and the error
file (requests that did not run: `batch_expired`, `batch_cancelled`, ... or that got a non-200 response). Both
parse into `BatchResult`; `ok` is true only for a 200 response with a JSON body.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from rise_batch.llm.pricing import PriceTable
from rise_batch.llm.retry import is_retryable_status
from rise_batch.types import Reply

ENDPOINT = "/v1/chat/completions"
MAX_REQUESTS = 50_000  # per input file (OpenAI)
MAX_BYTES = 200 * 1000 * 1000  # per input file: "200 MB", read the strict way
# Error codes of lines that may succeed if sent again; anything else (a 400: context too long, bad parameter) won't.
RETRYABLE_CODES = ("batch_expired", "batch_cancelled", "batch_failed", "missing", "server_error", "rate_limit_exceeded")


class BatchResult(NamedTuple):
    """What became of one request line. `body` is the chat completion (ok) or the error body of a non-200 reply."""

    custom_id: str
    ok: bool
    status_code: int | None = None
    body: dict[str, Any] | None = None
    error_code: str = ""
    error_message: str = ""

    @property
    def retryable(self) -> bool:
        if self.ok:
            return False
        if self.status_code is not None:
            return is_retryable_status(self.status_code)
        return self.error_code in RETRYABLE_CODES

    def describe(self) -> str:
        where = f"HTTP {self.status_code} " if self.status_code else ""
        return f"batch line {self.custom_id}: {where}{self.error_code or 'error'}: {self.error_message}"[:500]


# Characters that some line splitters (Python's str.splitlines, JavaScript) take for line ends; JSON may carry them
# raw inside strings, so a document holding one would break its request line in two for such a reader.
_LINE_BREAKERS = {"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"}


def request_line(custom_id: str, body: dict[str, Any], url: str = ENDPOINT) -> bytes:
    """One input line. Non-ASCII stays UTF-8 (not \\u escapes: a third less bytes on non-English corpora), except
    the Unicode line separators, which are escaped so that the line is one line for every reader."""
    line = {"custom_id": custom_id, "method": "POST", "url": url, "body": body}
    text = json.dumps(line, ensure_ascii=False, separators=(",", ":"))
    if any(c in text for c in _LINE_BREAKERS):
        for raw, escaped in _LINE_BREAKERS.items():
            text = text.replace(raw, escaped)
    return text.encode("utf-8") + b"\n"


def pack_lines(
    requests: Iterable[tuple[str, dict[str, Any]]],
    *,
    url: str = ENDPOINT,
    max_requests: int = MAX_REQUESTS,
    max_bytes: int = MAX_BYTES,
) -> Iterator[list[bytes]]:
    """Input files (as lists of lines) in request order, each within both limits.

    Refuses a duplicate custom_id (the API fails the whole batch for it) and a single request larger than a file
    may be (no packing can send it; the caller should have cut the document).
    """
    if max_requests <= 0 or max_bytes <= 0:
        raise ValueError(f"max_requests and max_bytes must be positive, got {max_requests}, {max_bytes}")
    seen: set[str] = set()
    lines: list[bytes] = []
    size = 0
    for custom_id, body in requests:
        if custom_id in seen:
            raise ValueError(f"duplicate custom_id {custom_id!r} in one batch")
        if not custom_id or "\n" in custom_id:
            raise ValueError(f"custom_id {custom_id!r} must be non-empty and hold no line break")
        seen.add(custom_id)
        line = request_line(custom_id, body, url)
        if len(line) > max_bytes:
            raise ValueError(f"request {custom_id!r} is {len(line):,} bytes, over the {max_bytes:,}-byte file limit")
        if lines and (len(lines) >= max_requests or size + len(line) > max_bytes):
            yield lines
            lines, size = [], 0
        lines.append(line)
        size += len(line)
    if lines:
        yield lines


def line_custom_id(line: bytes) -> str:
    return json.loads(line)["custom_id"]


def parse_results(data: bytes | str) -> Iterator[BatchResult]:
    """Every line of an output or error file; a line that is not JSON is an error of the file, not skipped."""
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    for n, raw in enumerate(text.split("\n"), 1):  # not splitlines(): U+2028 and friends may sit inside a string
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except json.JSONDecodeError as e:
            raise ValueError(f"batch result line {n} is not JSON: {e}") from None
        yield _result(rec)


def _result(rec: dict[str, Any]) -> BatchResult:
    custom_id = str(rec.get("custom_id", ""))
    response = rec.get("response") or None
    error = rec.get("error") or None
    if response is not None:
        status = response.get("status_code")
        body = response.get("body")
        if isinstance(body, str):  # some providers send the body as a JSON string
            try:
                body = json.loads(body)
            except json.JSONDecodeError:
                body = {"raw": body}
        if status == 200 and isinstance(body, dict) and error is None:
            return BatchResult(custom_id, True, 200, body)
        detail = (body or {}).get("error") if isinstance(body, dict) else None
        detail = detail if isinstance(detail, dict) else (error or {})
        return BatchResult(
            custom_id,
            False,
            status,
            body if isinstance(body, dict) else None,
            str(detail.get("code") or detail.get("type") or "http_error"),
            str(detail.get("message") or ""),
        )
    error = error or {}
    return BatchResult(custom_id, False, None, None, str(error.get("code") or "error"), str(error.get("message") or ""))


def missing_result(custom_id: str, batch_status: str) -> BatchResult:
    """A request that appears in neither file: the batch failed validation, was cancelled or expired before it."""
    code = {"cancelled": "batch_cancelled", "expired": "batch_expired", "failed": "batch_failed"}.get(
        batch_status, "missing"
    )
    return BatchResult(custom_id, False, None, None, code, f"no result line (batch {batch_status})")


def reply_from_body(body: dict[str, Any], prices: PriceTable, model: str = "", *, batch: bool = True) -> Reply:
    """A chat completion body (from a result line) as the priced Reply online calls produce.

    Raises ValueError for a body without choices: billed or not, there is nothing to parse, and the caller treats
    it as a failed line.
    """
    usage = body.get("usage") or {}
    prompt = int(usage.get("prompt_tokens") or 0)
    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    requested, model = model, str(body.get("model") or model)
    choices = body.get("choices") or []
    if not choices:
        raise ValueError("the reply has no choices")
    content = (choices[0].get("message") or {}).get("content") or ""
    cost = prices.cost(model, prompt, cached, completion, batch=batch, requested=requested or None)
    return Reply(content, prompt, cached, completion, cost, model)
