"""Fault settings of the fake server and the deterministic choice of which request gets which fault.

A fault is drawn from a hash of (seed, request key, attempt number for that key), never from a shared random
stream, so the same document meets the same faults whatever the concurrency and arrival order, and a retry (the
next attempt number) draws again and can succeed. The key is the document's hash for structuring requests.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from dataclasses import dataclass
from typing import Any

from rise_batch.options import Layout, Section, option

# Order matters: a draw u in [0, 1) picks the first fault whose cumulative probability exceeds it.
FAULTS = ("429", "500", "hang", "malformed", "empty", "400", "surrogate")
_PROBABILITY_FIELD = {
    "429": "p429",
    "500": "p500",
    "hang": "p_hang",
    "malformed": "p_malformed",
    "empty": "p_empty",
    "400": "p400",
    "surrogate": "p_surrogate",
}
RETRY_AFTER_STYLES = ("both", "ms", "seconds", "none")
# what a 2xx reply's `usage` says (the server's bill, its log, always holds the true counts): a server that bills
# one thing and reports another, for the spend journal's usage checks (money/usage.py)
USAGE_FAULTS = ("honest", "missing", "string", "nan", "x", "zeros", "tenth", "negative")
_INTS = ("seed", "max_faults_per_key", "rpm_limit", "tpm_limit", "n_ctx")
_STRINGS = ("retry_after_style", "require_key", "response_format", "usage")


@dataclass(frozen=True)
class FaultConfig:
    """Everything `POST /v1/_config`, the CLI flags and `FakeLLMServer(**faults)` can set."""

    latency_ms: float = option(0.0, help="latency added to every completion (ms)")
    latency_jitter_ms: float = option(0.0, help="plus a deterministic 0..N ms per request")
    p429: float = option(0.0, help="share of requests answered 429 with retry-after")
    p500: float = option(0.0, help="share answered 500")
    # longer than any sane client timeout
    p_hang: float = option(0.0, help="share that hang for --hang-s before answering")
    p_malformed: float = option(0.0, help="share whose reply content is truncated, invalid JSON")
    p_empty: float = option(0.0, help="share answered with an empty `choices` list")
    p400: float = option(0.0, help="share answered 400 (not retryable)")
    p_surrogate: float = option(
        0.0, help="share whose reply text ends in a lone surrogate escape (\\ud800): valid JSON orjson refuses"
    )
    seed: int = option(0, help="seed of the deterministic fault draw")
    # "fail once, then succeed"
    max_faults_per_key: int | None = option(None, help="only a document's first N attempts may fault")
    # random and rpm-limit 429s alike, at least
    retry_after_ms: float = option(100.0, help="what 429s ask clients to wait")
    retry_after_style: str = option(
        "both", choices=RETRY_AFTER_STYLES, help="which headers carry retry-after: both, ms, seconds or none"
    )
    hang_s: float = option(600.0, help="how long a hang lasts")
    rpm_limit: int | None = option(
        None, help="server-side requests per window: above it, 429 (also sends x-ratelimit-* headers)"
    )
    tpm_limit: int | None = option(None, help="server-side prompt tokens per window")
    limit_window_s: float = option(60.0, help="window of the server-side limits")  # tests shrink it
    require_key: str | None = option(None, parse=str, help="answer 401 unless this bearer token is sent")
    # as llama.cpp does: its slot's context is the prompt plus what it generates, said at GET /props
    n_ctx: int | None = option(
        None,
        help="a context of this many tokens, as llama.cpp's slot: a longer prompt is answered 400 'exceeds the "
        "available context size', a prompt plus reply past it 500 'Context size has been exceeded'; GET /props says it",
    )
    response_format: str = option(
        "obey",
        parse=str,
        help="obey (requests' response_format is checked like OpenAI's and answered in its shape) or refuse (400 "
        "'response_format not supported', as a provider without structured outputs)",
    )

    usage: str = option(
        "honest",
        parse=str,
        help='what every 2xx reply\'s usage says: honest, missing, string ("12"), nan, x, zeros, tenth (a tenth of '
        "the tokens) or negative; the server's own bill (GET /v1/_stats bill_usd) counts the true tokens",
    )

    def __post_init__(self) -> None:
        self._check_types()
        named = {f: getattr(self, f) for f in _PROBABILITY_FIELD.values()}
        probabilities = list(named.values())
        if any(not 0.0 <= p <= 1.0 for p in probabilities):
            raise ValueError(f"fault probabilities must be in [0, 1], got {named}")
        if sum(probabilities) > 1.0 + 1e-9:
            raise ValueError(f"fault probabilities add up to {sum(probabilities):.3f} > 1")
        if self.retry_after_style not in RETRY_AFTER_STYLES:
            raise ValueError(f"retry_after_style must be one of {RETRY_AFTER_STYLES}, got {self.retry_after_style!r}")
        for name in ("latency_ms", "latency_jitter_ms", "retry_after_ms", "hang_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        for name in ("rpm_limit", "tpm_limit", "n_ctx"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0 or None, got {getattr(self, name)!r}")
        if self.limit_window_s <= 0:
            raise ValueError(f"limit_window_s must be > 0, got {self.limit_window_s!r}")
        if self.usage not in USAGE_FAULTS:
            raise ValueError(f"usage must be one of {', '.join(USAGE_FAULTS)}, got {self.usage!r}")
        if self.response_format not in ("obey", "refuse"):  # fake_llm/schema.py RESPONSE_FORMAT_MODES
            raise ValueError(f"response_format must be 'obey' or 'refuse', got {self.response_format!r}")

    def _check_types(self) -> None:
        """Numbers must be finite numbers of the right kind: NaN passes every `<` test, so a NaN latency or window
        would otherwise be accepted and break the server's timing (JSON allows NaN and Infinity, CLI floats too)."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in _INTS:
                if value is None and f.name != "seed":
                    continue
                if not isinstance(value, int) or isinstance(value, bool):
                    raise ValueError(f"{f.name} must be an integer, got {value!r}")
            elif f.name in _STRINGS:
                if value is not None and not isinstance(value, str):
                    raise ValueError(f"{f.name} must be a string, got {value!r}")
            elif not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
                raise ValueError(f"{f.name} must be a finite number, got {value!r}")
        if self.max_faults_per_key is not None and self.max_faults_per_key < 0:
            raise ValueError(f"max_faults_per_key must be >= 0 or None, got {self.max_faults_per_key!r}")

    def updated(self, changes: dict[str, Any]) -> FaultConfig:
        """A copy with `changes` applied; unknown names are refused rather than silently ignored."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ValueError(f"unknown fake-llm settings: {', '.join(sorted(unknown))}")
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def draw(seed: int, key: str, attempt: int, salt: str = "") -> float:
    """A uniform number in [0, 1) fixed by its inputs."""
    digest = hashlib.blake2b(f"{seed}\x00{key}\x00{attempt}\x00{salt}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def choose_fault(config: FaultConfig, key: str, attempt: int) -> str | None:
    """The fault for attempt `attempt` (0-based) of request `key`, or None for a normal answer."""
    if config.max_faults_per_key is not None and attempt >= config.max_faults_per_key:
        return None
    u = draw(config.seed, key, attempt)
    edge = 0.0
    for fault in FAULTS:
        edge += getattr(config, _PROBABILITY_FIELD[fault])
        if u < edge:
            return fault
    return None


def reported_usage(mode: str, counts: dict[str, Any]) -> Any:
    """The `usage` a reply states under usage fault `mode` (`counts`: the true ones, which the server bills)."""
    if mode == "honest":
        return counts
    if mode == "missing":
        return None
    scale = {"zeros": 0.0, "tenth": 0.1, "negative": -1.0}.get(mode)
    value = {"string": lambda n: str(n), "nan": lambda n: math.nan, "x": lambda n: "x"}.get(mode)
    if value is None:
        value = lambda n: int(n * scale)  # noqa: E731
    return {
        **counts,
        "prompt_tokens": value(counts["prompt_tokens"]),
        "completion_tokens": value(counts["completion_tokens"]),
        "total_tokens": value(counts["total_tokens"]),
    }


def latency_s(config: FaultConfig, key: str, attempt: int) -> float:
    jitter = config.latency_jitter_ms * draw(config.seed, key, attempt, "latency") if config.latency_jitter_ms else 0
    return (config.latency_ms + jitter) / 1000.0


# `rise-batch fake-llm`'s fault flags: None when not given, the server then keeps these fields' defaults
FAULT_OPTIONS = Layout(
    FaultConfig,
    (
        Section(
            None,
            (
                *("latency_ms", "latency_jitter_ms", "p429", "p500", "p_hang", "p_malformed", "p_empty", "p400"),
                "p_surrogate",
                *("seed", "max_faults_per_key", "retry_after_ms", "hang_s", "rpm_limit", "tpm_limit"),
                *("limit_window_s", "require_key", "response_format", "n_ctx", "usage"),
            ),
        ),
    ),
)
