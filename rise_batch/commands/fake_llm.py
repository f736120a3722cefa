"""`rise-batch fake-llm`: run the project's OpenAI-compatible test server in the foreground.

Point a job's `llm.base_url` at it to dry-run structuring for free (no key needed for localhost), or to rehearse
rate limits and failures before paying for them. `GET /v1/_stats` and `GET /v1/_log` show what it received;
`POST /v1/_config` changes fault settings while it runs only when started with --allow-config.
"""

from __future__ import annotations

import argparse

_FAULT_FLAGS = [
    ("--latency-ms", float, "latency added to every completion (ms)"),
    ("--latency-jitter-ms", float, "plus a deterministic 0..N ms per request"),
    ("--p429", float, "share of requests answered 429 with retry-after"),
    ("--p500", float, "share answered 500"),
    ("--p-hang", float, "share that hang for --hang-s before answering"),
    ("--p-malformed", float, "share whose reply content is truncated, invalid JSON"),
    ("--p-empty", float, "share answered with an empty `choices` list"),
    ("--p400", float, "share answered 400 (not retryable)"),
    ("--seed", int, "seed of the deterministic fault draw"),
    ("--max-faults-per-key", int, "only a document's first N attempts may fault"),
    ("--retry-after-ms", float, "what 429s ask clients to wait"),
    ("--hang-s", float, "how long a hang lasts"),
    ("--rpm-limit", int, "server-side requests per window: above it, 429 (also sends x-ratelimit-* headers)"),
    ("--tpm-limit", int, "server-side prompt tokens per window"),
    ("--limit-window-s", float, "window of the server-side limits (default 60)"),
    ("--require-key", str, "answer 401 unless this bearer token is sent"),
    (
        "--response-format",
        str,
        "obey (default: requests' response_format is checked like OpenAI's and answered in its shape) or refuse "
        "(400 'response_format not supported', as a provider without structured outputs)",
    ),
]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "fake-llm",
        help="run a local OpenAI-compatible test server (deterministic replies, injectable faults)",
        description=__doc__,
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8765, help="0 picks a free port (printed at start)")
    p.add_argument(
        "--allow-config",
        action="store_true",
        help="let anyone who can reach the port change settings (POST /v1/_config, _batch_config, _reset)",
    )
    p.add_argument(
        "--judge-reply",
        default="grader",
        help="how judge requests are answered: grader (default); echo (non-grader text repeating the prompt) or "
        "truncated (a grader reply cut before its last field) to rehearse a broken judge; echo-once and "
        "truncated-once answer the judge's re-ask properly",
    )
    p.add_argument("--max-body-bytes", type=int, default=None, help="larger requests get a 413 (default 256 MiB)")
    p.add_argument(
        "--max-buffered-bytes",
        type=int,
        default=None,
        help="request bodies held at once across connections; a request that would pass it gets a 503 unread "
        "(default twice --max-body-bytes, at least 512 MiB)",
    )
    for name, what, default in (
        ("header", "a request's head must arrive within (else 408, connection closed)", 30),
        ("body", "a request's whole body must arrive within (else 408, connection closed)", 300),
        ("idle", "an idle keep-alive connection is closed after", 120),
    ):  # the defaults are http.ConnectionLimits' (not imported here: building the CLI's parser stays cheap)
        p.add_argument(f"--{name}-timeout-s", type=float, default=None, help=f"seconds {what} (default {default})")
    p.add_argument(
        "--engine",
        choices=("asyncio", "threads"),
        default="asyncio",
        help="HTTP engine: asyncio (default; one event loop, the least CPU per request) or threads (the standard "
        "library's ThreadingHTTPServer, one thread per connection); both serve the same routes and faults",
    )
    for flag, kind, text in _FAULT_FLAGS:
        p.add_argument(flag, type=kind, default=None, help=text)
    p.set_defaults(func=run)


def fault_options(args: argparse.Namespace) -> dict[str, object]:
    names = [flag[2:].replace("-", "_") for flag, _, _ in _FAULT_FLAGS]
    return {n: getattr(args, n) for n in names if getattr(args, n) is not None}


def run(args: argparse.Namespace) -> int:
    import json
    import signal
    import threading

    from rise_batch.fake_llm import FakeLLMServer
    from rise_batch.fake_llm.chat import default_responders
    from rise_batch.fake_llm.http import ConnectionLimits

    limits: dict[str, object] = {"allow_config": args.allow_config, "engine": args.engine}
    if args.max_body_bytes is not None:
        limits["max_body_bytes"] = args.max_body_bytes
    given = {
        n: getattr(args, n) for n in ("header_timeout_s", "body_timeout_s", "idle_timeout_s", "max_buffered_bytes")
    }
    if any(v is not None for v in given.values()):
        base = ConnectionLimits.for_bodies(args.max_body_bytes or 0)
        limits["limits"] = base._replace(**{n: v for n, v in given.items() if v is not None})
    responders = default_responders(args.judge_reply)  # bad settings: ValueError, exit 2
    server = FakeLLMServer(args.host, args.port, responders=responders, **limits, **fault_options(args))
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    with server:
        print(f"fake-llm serving on {server.base_url} (stats: {server.base_url}/_stats); Ctrl-C stops", flush=True)
        try:
            done.wait()
        except KeyboardInterrupt:
            pass
        stats = server.stats()
    summary = {k: stats[k] for k in ("requests", "by_status", "by_fault", "prompt_tokens", "completion_tokens")}
    print("fake-llm stopped: " + json.dumps(summary), flush=True)
    return 0
