"""`rise-batch fake-llm`: run the project's OpenAI-compatible test server in the foreground.

Point a job's `llm.base_url` at it to dry-run structuring for free (no key needed for localhost), or to rehearse
rate limits and failures before paying for them. `GET /v1/_stats` and `GET /v1/_log` show what it received;
`POST /v1/_config` changes fault settings while it runs only when started with --allow-config.
"""

from __future__ import annotations

import argparse

from rise_batch.fake_llm.faults import FAULT_OPTIONS
from rise_batch.fake_llm.serve_options import LIMIT_OPTIONS, SERVE_OPTIONS
from rise_batch.options import add_layout


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "fake-llm",
        help="run a local OpenAI-compatible test server (deterministic replies, injectable faults)",
        description=__doc__,
    )
    add_layout(p, SERVE_OPTIONS)
    add_layout(p, LIMIT_OPTIONS)
    add_layout(p, FAULT_OPTIONS)
    p.set_defaults(func=run)


def fault_options(args: argparse.Namespace) -> dict[str, object]:
    """The fault flags given (the rest keep FaultConfig's defaults)."""
    names = [e.key for _, e in FAULT_OPTIONS.entries()]
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
