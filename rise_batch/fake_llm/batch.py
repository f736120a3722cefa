"""The fake server's Batch API: `/v1/files` (multipart upload, content download) and `/v1/batches`.

Lines are answered by the same responders and usage counting as `/v1/chat/completions`, so a batch run structures
documents exactly as an online run does and its token counts are comparable. Batches complete lazily, when polled
after `delay_s`; `hold` keeps them in progress until a test lets go (so a driver can be killed between submit and
collect without racing a clock). Partial failures (`p_line_error`: a 500 for that line, in the error file) are drawn
deterministically per custom_id; `expire_after` makes every batch expire after answering its first N lines (the rest
go to the error file as `batch_expired`, as the real API reports them). Counters (`files_uploaded`,
`batches_created`, ...) let a test assert that a resumed driver submitted nothing twice.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from rise_batch.fake_llm.chat import RouteHost, usage
from rise_batch.fake_llm.faults import draw
from rise_batch.fake_llm.http import BadRequest, HttpRequest, HttpResponse, dumps, error_body, json_response
from rise_batch.fake_llm.request import ChatRequest
from rise_batch.fake_llm.schema import format_type, response_format_error

ENDPOINTS = ("/v1/chat/completions",)
COUNTERS = (
    "files_uploaded",
    "batches_created",
    "batches_cancelled",
    "batch_polls",
    "content_downloads",
    "lines_answered",
    "lines_failed",
)


@dataclass(frozen=True)
class BatchSettings:
    delay_s: float = 0.0  # a batch completes at the first poll at least this long after its creation
    hold: bool = False  # True: batches stay in_progress (until set back to False)
    p_line_error: float = 0.0  # share of lines answered with a 500 (error file)
    expire_after: int | None = None  # every batch expires after answering its first N lines
    fail_code: str | None = None  # every batch fails validation with this error code (e.g. token_limit_exceeded)
    seed: int = 0


class BatchAPI:
    """Files and batches of one fake server, in memory, behind one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.settings = BatchSettings()
        self.files: dict[str, dict[str, Any]] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.counts: Counter[str] = Counter()
        self._ids = itertools.count(1)

    def configure(self, **changes: Any) -> BatchSettings:
        unknown = set(changes) - {f.name for f in dataclasses.fields(BatchSettings)}
        if unknown:
            raise ValueError(f"unknown batch settings: {', '.join(sorted(unknown))}")
        with self.lock:
            self.settings = dataclasses.replace(self.settings, **changes)
            return self.settings

    def stats(self) -> dict[str, Any]:
        with self.lock:
            by_status = Counter(b["status"] for b in self.batches.values())
            counts = dict.fromkeys(COUNTERS, 0) | dict(self.counts)
            return counts | {"by_status": dict(by_status), "settings": dataclasses.asdict(self.settings)}

    def new_id(self, prefix: str) -> str:
        return f"{prefix}-fake{next(self._ids):06d}"

    def add_file(self, data: bytes, filename: str, purpose: str) -> dict[str, Any]:
        f = {
            "id": self.new_id("file"),
            "object": "file",
            "bytes": len(data),
            "created_at": int(time.time()),
            "filename": filename,
            "purpose": purpose,
            "status": "processed",
        }
        self.files[f["id"]] = f | {"data": data}
        return f


def api(server: RouteHost) -> BatchAPI:
    found = getattr(server, "batch_api", None)
    if found is None:
        found = server.batch_api = BatchAPI()  # type: ignore[attr-defined]
    return found


def install(server: RouteHost) -> None:
    """Register the routes on a server (called by FakeLLMServer itself)."""
    api(server)
    for method, pattern, handler in ROUTES:
        server.add_route(method, pattern, handler)


# -- files ------------------------------------------------------------------------------------------------------
def _multipart(request: HttpRequest) -> dict[str, tuple[str | None, bytes]]:
    """name -> (filename, bytes) of a multipart/form-data body, byte for byte."""
    ctype = request.headers.get("Content-Type") or ""
    m = re.search(r'boundary="?([^";]+)"?', ctype)
    if "multipart/form-data" not in ctype or not m:
        raise BadRequest("POST /v1/files takes multipart/form-data")
    fields: dict[str, tuple[str | None, bytes]] = {}
    for part in request.body.split(b"--" + m.group(1).encode())[1:]:
        if part.startswith(b"--"):
            break
        head, _, data = part.removeprefix(b"\r\n").partition(b"\r\n\r\n")
        disposition = head.decode("utf-8", "replace")
        name = re.search(r'name="([^"]*)"', disposition)
        filename = re.search(r'filename="([^"]*)"', disposition)
        if name:
            fields[name.group(1)] = (filename.group(1) if filename else None, data.removesuffix(b"\r\n"))
    return fields


def _create_file(server: RouteHost, request: HttpRequest, _: re.Match[str]) -> HttpResponse:
    fields = _multipart(request)
    if "file" not in fields:
        raise BadRequest("missing multipart field 'file'")
    purpose = fields.get("purpose", (None, b""))[1].decode()
    if purpose != "batch":
        raise BadRequest(f"the fake server only stores purpose=batch files, got {purpose!r}")
    b = api(server)
    with b.lock:
        f = b.add_file(fields["file"][1], fields["file"][0] or "upload.jsonl", purpose)
        b.counts["files_uploaded"] += 1
    return json_response(200, f)


def _get_file(server: RouteHost, request: HttpRequest, m: re.Match[str]) -> HttpResponse:
    b = api(server)
    with b.lock:
        f = b.files.get(m.group(1))
    if f is None:
        return _missing("File", m.group(1))
    return json_response(200, {k: v for k, v in f.items() if k != "data"})


def _file_content(server: RouteHost, request: HttpRequest, m: re.Match[str]) -> HttpResponse:
    b = api(server)
    with b.lock:
        f = b.files.get(m.group(1))
        b.counts["content_downloads"] += 1
    if f is None:
        return _missing("File", m.group(1))
    return HttpResponse(200, f["data"], {}, "application/octet-stream")


# -- batches ----------------------------------------------------------------------------------------------------
def _create_batch(server: RouteHost, request: HttpRequest, _: re.Match[str]) -> HttpResponse:
    body = request.json()
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    endpoint, window = body.get("endpoint"), body.get("completion_window")
    if endpoint not in ENDPOINTS:
        raise BadRequest(f"endpoint {endpoint!r} is not supported by the fake server (only {ENDPOINTS})")
    if window != "24h":
        raise BadRequest("completion_window must be '24h'")
    b = api(server)
    with b.lock:
        f = b.files.get(str(body.get("input_file_id")))
        if f is None or f["purpose"] != "batch":
            raise BadRequest(f"input_file_id {body.get('input_file_id')!r} is not an uploaded batch file")
        now = int(time.time())
        batch = {
            "id": b.new_id("batch"),
            "object": "batch",
            "endpoint": endpoint,
            "errors": None,
            "input_file_id": f["id"],
            "completion_window": window,
            "status": "validating",
            "output_file_id": None,
            "error_file_id": None,
            "created_at": now,
            "in_progress_at": None,
            "expires_at": now + 24 * 3600,
            "completed_at": None,
            "failed_at": None,
            "expired_at": None,
            "cancelling_at": None,
            "cancelled_at": None,
            "request_counts": {"total": 0, "completed": 0, "failed": 0},
            "metadata": body.get("metadata"),
            "_created": time.monotonic(),
        }
        b.batches[batch["id"]] = batch
        b.counts["batches_created"] += 1
        return json_response(200, _public(batch))


def _missing(kind: str, object_id: str) -> HttpResponse:
    return json_response(404, error_body(f"No such {kind} object: {object_id}", "invalid_request_error"))


def _public(batch: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in batch.items() if not k.startswith("_")}


def _get_batch(server: RouteHost, request: HttpRequest, m: re.Match[str]) -> HttpResponse:
    b = api(server)
    with b.lock:
        batch = b.batches.get(m.group(1))
        if batch is None:
            return _missing("Batch", m.group(1))
        b.counts["batch_polls"] += 1
        _advance(server, b, batch)
        return json_response(200, _public(batch))


def _list_batches(server: RouteHost, request: HttpRequest, _: re.Match[str]) -> HttpResponse:
    b = api(server)
    limit = max(1, min(100, int(request.query.get("limit", 20))))
    after = request.query.get("after")
    with b.lock:
        items = sorted(b.batches.values(), key=lambda x: x["id"], reverse=True)  # newest first, as the API does
        if after:
            items = [x for x in items if x["id"] < after]
        page = [_public(x) for x in items[:limit]]
    return json_response(
        200,
        {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(items) > limit,
        },
    )


def _cancel_batch(server: RouteHost, request: HttpRequest, m: re.Match[str]) -> HttpResponse:
    b = api(server)
    with b.lock:
        batch = b.batches.get(m.group(1))
        if batch is None:
            return _missing("Batch", m.group(1))
        if batch["status"] in ("validating", "in_progress"):
            batch.update(status="cancelling", cancelling_at=int(time.time()))
            b.counts["batches_cancelled"] += 1
        return json_response(200, _public(batch))


def _advance(server: RouteHost, b: BatchAPI, batch: dict[str, Any]) -> None:
    """One poll's worth of progress: validating -> in_progress -> completed | expired (cancelling -> cancelled)."""
    now = int(time.time())
    if batch["status"] == "cancelling":
        batch.update(status="cancelled", cancelled_at=now)
    elif batch["status"] == "validating":
        lines, errors = _validate(b.files[batch["input_file_id"]]["data"], batch["endpoint"])
        if b.settings.fail_code:
            errors.append({"code": b.settings.fail_code, "line": None, "message": "(fake) refused", "param": None})
        if errors:
            batch.update(status="failed", failed_at=now, errors={"object": "list", "data": errors})
        else:
            batch.update(status="in_progress", in_progress_at=now)
            batch["_lines"] = lines
            batch["request_counts"]["total"] = len(lines)
    elif batch["status"] == "in_progress":
        s = b.settings
        if s.hold or time.monotonic() - batch["_created"] < s.delay_s:
            return
        _process(server, b, batch)


def _validate(data: bytes, endpoint: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The input file's lines, or the errors that fail the whole batch (as the API's validation does)."""
    lines: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    seen: set[str] = set()
    models: set[str] = set()
    for n, raw in enumerate(data.decode("utf-8", "replace").split("\n"), 1):  # lines end at \n only, as JSONL's do
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except json.JSONDecodeError:
            errors.append({"code": "invalid_json_line", "line": n, "message": "not JSON", "param": None})
            continue
        cid = rec.get("custom_id")
        if not isinstance(cid, str) or not cid or cid in seen:
            message = f"missing or repeated custom_id {cid!r}"
            errors.append({"code": "duplicate_custom_id", "line": n, "message": message, "param": None})
        elif rec.get("method") != "POST" or rec.get("url") != endpoint or not isinstance(rec.get("body"), dict):
            errors.append({"code": "invalid_request", "line": n, "message": "method/url/body", "param": None})
        else:
            seen.add(cid)
            models.add(str(rec["body"].get("model")))
            lines.append(rec)
    if len(models) > 1:
        errors.append({"code": "mixed_models", "line": None, "message": f"models {sorted(models)}", "param": None})
    return lines, errors[:100]


def _process(server: RouteHost, b: BatchAPI, batch: dict[str, Any]) -> None:
    s = b.settings
    out: list[bytes] = []
    err: list[bytes] = []
    for n, rec in enumerate(batch.pop("_lines")):
        cid = rec["custom_id"]
        line_id = f"batch_req_{batch['id']}_{n}"
        if s.expire_after is not None and n >= s.expire_after:
            error = {"code": "batch_expired", "message": "This request could not be executed before the window."}
            err.append(dumps({"id": line_id, "custom_id": cid, "response": None, "error": error}) + b"\n")
            continue
        if s.p_line_error and draw(s.seed, cid, 0, "batch-line") < s.p_line_error:
            body = error_body("The server had an error (fake batch line)", "server_error")
            response = {"status_code": 500, "request_id": line_id, "body": body}
            err.append(dumps({"id": line_id, "custom_id": cid, "response": response, "error": None}) + b"\n")
            continue
        status, body = _answer(server, rec["body"], batch["id"])
        response = {"status_code": status, "request_id": line_id, "body": body}
        (out if status == 200 else err).append(
            dumps({"id": line_id, "custom_id": cid, "response": response, "error": None}) + b"\n"
        )
    now = int(time.time())
    counts = batch["request_counts"]
    counts.update(completed=len(out), failed=len(err))
    b.counts["lines_answered"] += len(out)
    b.counts["lines_failed"] += len(err)
    if out:
        batch["output_file_id"] = b.add_file(b"".join(out), f"{batch['id']}_output.jsonl", "batch_output")["id"]
    if err:
        batch["error_file_id"] = b.add_file(b"".join(err), f"{batch['id']}_error.jsonl", "batch_output")["id"]
    if s.expire_after is not None and counts["total"] > s.expire_after:
        batch.update(status="expired", expired_at=now)
    else:
        batch.update(status="completed", completed_at=now, finalizing_at=now)


def _answer(server: RouteHost, body: dict[str, Any], batch_id: str) -> tuple[int, dict[str, Any]]:
    """One line through the chat responders; logged in the server's request log like an online request."""
    try:
        request = ChatRequest.parse(body)
    except BadRequest as e:
        return 400, error_body(str(e), "invalid_request_error")
    refused = response_format_error(request.body, server.state.config.response_format)
    if refused is not None:
        return 400, error_body(refused, "invalid_request_error", "invalid_parameter")
    responder = next(r for r in server.responders if r.matches(request))
    message = responder.respond(request)
    counts = usage(server.state, request, message.get("content") or "")
    server.state.record(
        {
            "t": time.time(),
            "path": "batch:" + batch_id,
            "key": request.key,
            "attempt": 0,
            "model": request.model,
            "responder": responder.name,
            "response_format": format_type(request.body),
            "status": 200,
            "fault": None,
            "prompt_tokens": counts["prompt_tokens"],
            "cached_tokens": counts["prompt_tokens_details"]["cached_tokens"],
            "completion_tokens": counts["completion_tokens"],
        }
    )
    choice = {"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}
    return 200, {
        "id": f"chatcmpl-fake-{request.key}-batch",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model,
        "choices": [choice],
        "usage": counts,
        "system_fingerprint": "fake-llm",
    }


def _stats(server: RouteHost, request: HttpRequest, _: re.Match[str]) -> HttpResponse:
    return json_response(200, api(server).stats())


def _config(server: RouteHost, request: HttpRequest, _: re.Match[str]) -> HttpResponse:
    changes = request.json()
    if not isinstance(changes, dict):
        raise BadRequest("POST /v1/_batch_config takes a JSON object of settings")
    try:
        return json_response(200, dataclasses.asdict(api(server).configure(**changes)))
    except (TypeError, ValueError) as e:
        raise BadRequest(str(e)) from None


ROUTES = [
    ("POST", "/v1/files", _create_file),
    ("GET", r"/v1/files/([^/]+)", _get_file),
    ("GET", r"/v1/files/([^/]+)/content", _file_content),
    ("POST", "/v1/batches", _create_batch),
    ("GET", "/v1/batches", _list_batches),
    ("GET", r"/v1/batches/([^/]+)", _get_batch),
    ("POST", r"/v1/batches/([^/]+)/cancel", _cancel_batch),
    ("GET", "/v1/_batch_stats", _stats),
    ("POST", "/v1/_batch_config", _config),
]
