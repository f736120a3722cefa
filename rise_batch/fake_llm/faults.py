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

# Order matters: a draw u in [0, 1) picks the first fault whose cumulative probability exceeds it.
FAULTS = ("429", "500", "hang", "malformed", "empty", "400")
_PROBABILITY_FIELD = {
    "429": "p429",
    "500": "p500",
    "hang": "p_hang",
    "malformed": "p_malformed",
    "empty": "p_empty",
    "400": "p400",
}
RETRY_AFTER_STYLES = ("both", "ms", "seconds", "none")
_INTS = ("seed", "max_faults_per_key", "rpm_limit", "tpm_limit")
_STRINGS = ("retry_after_style", "require_key", "response_format")


@dataclass(frozen=True)
class FaultConfig:
    """Everything `POST /v1/_config`, the CLI flags and `FakeLLMServer(**faults)` can set."""

    latency_ms: float = 0.0  # added to every chat completion
    latency_jitter_ms: float = 0.0  # plus a deterministic 0..jitter per request
    p429: float = 0.0  # rate-limit error with retry-after headers
    p500: float = 0.0  # internal server error
    p_hang: float = 0.0  # sleep `hang_s` before answering (longer than any sane client timeout)
    p_malformed: float = 0.0  # 200 whose message content is truncated, invalid JSON
    p_empty: float = 0.0  # 200 with `choices: []`
    p400: float = 0.0  # bad request (a client error that must not be retried)
    seed: int = 0
    max_faults_per_key: int | None = None  # only a key's first N attempts may fault: "fail once, then succeed"
    retry_after_ms: float = 100.0  # what 429s (random and rpm-limit ones) ask the client to wait, at least
    retry_after_style: str = "both"  # which headers carry it: both | ms | seconds | none
    hang_s: float = 600.0
    rpm_limit: int | None = None  # server-side limits: exceed them and get a 429 (also turns on x-ratelimit-*)
    tpm_limit: int | None = None
    limit_window_s: float = 60.0  # the limits above count over this window (tests shrink it)
    require_key: str | None = None  # when set, any other bearer token gets a 401
    response_format: str = "obey"  # requests' response_format: "obey" (checked, answered in shape) or "refuse" (400)

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
        for name in ("rpm_limit", "tpm_limit"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0 or None, got {getattr(self, name)!r}")
        if self.limit_window_s <= 0:
            raise ValueError(f"limit_window_s must be > 0, got {self.limit_window_s!r}")
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


def latency_s(config: FaultConfig, key: str, attempt: int) -> float:
    jitter = config.latency_jitter_ms * draw(config.seed, key, attempt, "latency") if config.latency_jitter_ms else 0
    return (config.latency_ms + jitter) / 1000.0
