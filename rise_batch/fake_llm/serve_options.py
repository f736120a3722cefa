"""How `rise-batch fake-llm` serves (address, engine, connection limits, the judge's replies), one field each
(rise_batch/options.py): the flags are made from them, and the server's own defaults (server.py, http.py
ConnectionLimits, chat.default_responders) are read from them. Fault settings are FaultConfig's (faults.py)."""

from __future__ import annotations

from dataclasses import dataclass

from rise_batch.options import Layout, Section, option

MIB = 2**20


@dataclass(frozen=True)
class ServeOptions:
    host: str = option("127.0.0.1", help="address to listen on (the default: this machine only)")
    port: int = option(8765, help="0 picks a free port (printed at start)", shown="8765")
    allow_config: bool = option(
        False, help="let anyone who can reach the port change settings (POST /v1/_config, _batch_config, _reset)"
    )
    judge_reply: str = option(
        "grader",
        help="how judge requests are answered: grader; echo (non-grader text repeating the prompt) or truncated (a "
        "grader reply cut before its last field) to rehearse a broken judge; echo-once and truncated-once answer the "
        "judge's re-ask properly",
    )
    engine: str = option(
        "asyncio",
        choices=("asyncio", "threads"),
        help="HTTP engine: asyncio (one event loop, the least CPU per request) or threads (the standard library's "
        "ThreadingHTTPServer, one thread per connection); both serve the same routes and faults",
    )
    # above the Batch API's 200 MB input file, so a real batch upload still fits
    max_body_bytes: int = option(256 * MIB, help="larger requests get a 413", shown="256 MiB")
    max_buffered_bytes: int = option(
        2 * 256 * MIB,
        help="request bodies held at once across connections; a request that would pass it gets a 503 unread",
        shown="twice --max-body-bytes, at least 512 MiB",
    )
    header_timeout_s: float = option(
        30.0, help="seconds a request's head must arrive within (else 408, connection closed)"
    )
    body_timeout_s: float = option(
        300.0, help="seconds a request's whole body must arrive within (else 408, connection closed)"
    )
    idle_timeout_s: float = option(120.0, help="seconds after which an idle keep-alive connection is closed")


# host, port, engine and the judge's replies default to the fields; the limits' flags stay None ("not given": the
# server's defaults, which are these fields, max_buffered_bytes grown with --max-body-bytes)
SERVE_OPTIONS = Layout(ServeOptions, (Section(None, ("host", "port", "allow_config", "judge_reply", "engine")),), False)
LIMIT_OPTIONS = Layout(
    ServeOptions,
    (Section(None, ("max_body_bytes", "max_buffered_bytes", "header_timeout_s", "body_timeout_s", "idle_timeout_s")),),
)
