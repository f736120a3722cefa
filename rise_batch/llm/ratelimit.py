"""Requests-per-minute and tokens-per-minute limiting as plain arithmetic on an injected clock.

No asyncio and no sleeping here: `reserve()` either grants a lease or says how long to wait, so the same object
serves an asyncio wrapper (rise_batch/llm/limiter.py), a cluster-wide Ray actor, and millisecond unit tests with a
fake clock.

Each limited resource (requests, tokens) has two constraints:
- a sliding-window log: the amounts granted in any `window_s` seconds never exceed the limit. This is the
  guarantee a provider's per-minute limit needs, and unlike a plain token bucket (which lets `limit` through at
  once and then refills for a whole window, up to twice the limit per minute) it holds exactly;
- a token bucket refilling at limit/window with `burst_s` seconds of capacity, which spreads the grants over the
  window instead of spending the whole minute's allowance in the first second (providers also enforce limits over
  shorter periods). A request larger than the bucket waits for a full bucket and then goes alone (debt), so an
  oversized request delays others instead of deadlocking.

Leases are trued up with the tokens the reply reports (`settle`), a 429 sets a global cool-down (`penalize`), and
the provider's `x-ratelimit-*` headers may lower limits or pause until reset (`observe`, when `adapt` is on).
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from rise_batch.llm.retry import get_header

_EPS = 1e-9
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


@dataclass(frozen=True)
class RateLimits:
    """Limits per `window_s` seconds (60 in production, so rpm/tpm; tests shrink the window). None = unlimited."""

    rpm: float | None = None
    tpm: float | None = None
    window_s: float = 60.0
    burst_s: float | None = 1.0  # bucket capacity in seconds of refill; None = window log only
    adapt: bool = False  # follow x-ratelimit-* headers (lower limits, pause at remaining 0)

    def __post_init__(self) -> None:
        for name in ("rpm", "tpm"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be > 0 or None, got {value!r}")
        if not self.window_s > 0:
            raise ValueError(f"window_s must be > 0, got {self.window_s!r}")
        if self.burst_s is not None and not self.burst_s > 0:
            raise ValueError(f"burst_s must be > 0 or None, got {self.burst_s!r}")


class Lease(NamedTuple):
    """A granted request slot; picklable so a limiter actor can hand it across processes."""

    id: int
    tokens: int  # the estimate reserved
    granted_at: float


class _Entry:
    __slots__ = ("t", "amount", "live")

    def __init__(self, t: float, amount: float) -> None:
        self.t, self.amount, self.live = t, amount, True


class SlidingWindow:
    """Exact log of amounts granted in the last `window_s` seconds."""

    def __init__(self, limit: float, window_s: float = 60.0) -> None:
        self.limit, self.window_s = limit, window_s
        self._entries: deque[_Entry] = deque()
        self._used = 0.0

    def _expire(self, now: float) -> None:
        while self._entries and self._entries[0].t + self.window_s <= now:
            gone = self._entries.popleft()
            gone.live = False
            self._used -= gone.amount

    def used(self, now: float) -> float:
        self._expire(now)
        return self._used

    def wait(self, now: float, amount: float) -> float:
        """Seconds until `amount` fits (an amount above the limit fits once the window is empty)."""
        amount = min(amount, self.limit)
        excess = self.used(now) + amount - self.limit
        if excess <= _EPS:
            return 0.0
        for entry in self._entries:
            excess -= entry.amount
            if excess <= _EPS:
                return entry.t + self.window_s - now
        return self._entries[-1].t + self.window_s - now if self._entries else 0.0

    def add(self, now: float, amount: float) -> _Entry:
        entry = _Entry(now, amount)
        self._entries.append(entry)
        self._used += amount
        return entry

    def adjust(self, entry: _Entry, delta: float) -> None:
        if entry.live:
            entry.amount += delta
            self._used += delta


class TokenBucket:
    """Refills at `rate` per second up to `capacity`; may go into debt for a request larger than capacity."""

    def __init__(self, rate: float, capacity: float, now: float) -> None:
        self.rate, self.capacity = rate, capacity
        self.level, self._last = capacity, now

    def _refill(self, now: float) -> None:
        if now > self._last:
            self.level = min(self.capacity, self.level + (now - self._last) * self.rate)
            self._last = now

    def wait(self, now: float, amount: float) -> float:
        self._refill(now)
        missing = min(amount, self.capacity) - self.level
        return 0.0 if missing <= _EPS * max(1.0, self.capacity) else missing / self.rate

    def take(self, now: float, amount: float) -> None:
        self._refill(now)
        self.level -= amount


class _Resource:
    def __init__(self, limit: float, limits: RateLimits, now: float) -> None:
        self.window = SlidingWindow(limit, limits.window_s)
        self.burst_s = limits.burst_s
        self.bucket = self._bucket(limit, now) if limits.burst_s else None

    def _bucket(self, limit: float, now: float) -> TokenBucket:
        rate = limit / self.window.window_s
        return TokenBucket(rate, max(rate * (self.burst_s or 0.0), 1.0), now)

    def wait(self, now: float, amount: float) -> float:
        bucket_wait = self.bucket.wait(now, amount) if self.bucket else 0.0
        return max(self.window.wait(now, amount), bucket_wait)

    def take(self, now: float, amount: float) -> _Entry:
        if self.bucket:
            self.bucket.take(now, amount)
        return self.window.add(now, amount)

    def adjust(self, entry: _Entry, delta: float) -> None:
        self.window.adjust(entry, delta)
        if self.bucket:
            self.bucket.level = min(self.bucket.capacity, self.bucket.level - delta)

    def lower_limit(self, limit: float, now: float) -> None:
        if limit < self.window.limit:
            self.window.limit = limit
            if self.bucket:
                level = self.bucket.level
                self.bucket = self._bucket(limit, now)
                self.bucket.level = min(level, self.bucket.capacity)


class RateLimiter:
    """The pure limiter: `reserve` -> Lease or seconds to wait; `settle`, `penalize`, `observe` adjust it."""

    def __init__(self, limits: RateLimits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits, self.clock = limits, clock
        now = clock()
        self._requests = _Resource(limits.rpm, limits, now) if limits.rpm else None
        self._tokens = _Resource(limits.tpm, limits, now) if limits.tpm else None
        self._open: dict[int, _Entry] = {}
        self._next_id = 0
        self._last_est = 0
        self.cooldown_until = float("-inf")

    def reserve(self, est_tokens: int) -> Lease | float:
        now = self.clock()
        waits = [self.cooldown_until - now]
        if self._requests:
            waits.append(self._requests.wait(now, 1))
        if self._tokens:
            waits.append(self._tokens.wait(now, est_tokens))
        wait = max(waits)
        if wait > 0:
            return wait
        self._next_id += 1
        if self._requests:
            self._requests.take(now, 1)
        if self._tokens:
            self._open[self._next_id] = self._tokens.take(now, est_tokens)
            if len(self._open) > 4096 and self._next_id % 1024 == 0:  # drop leases that were never settled
                self._open = {k: e for k, e in self._open.items() if e.live}
        self._last_est = est_tokens
        return Lease(self._next_id, est_tokens, now)

    def settle(self, lease: Lease, actual_tokens: int) -> None:
        """Replace the lease's estimate by the tokens the reply actually used."""
        entry = self._open.pop(lease.id, None)
        if self._tokens and entry is not None:
            self._tokens.adjust(entry, actual_tokens - lease.tokens)

    def penalize(self, seconds: float) -> None:
        """Global cool-down: nothing is granted for `seconds` from now (the longest of overlapping penalties)."""
        self.cooldown_until = max(self.cooldown_until, self.clock() + max(seconds, 0.0))

    def observe(self, headers: Mapping[str, str] | None) -> None:
        """Adapt to the provider's view of our limits, which also counts other clients sharing the key."""
        if not self.limits.adapt or not headers:
            return
        now = self.clock()
        for resource, suffix, need in ((self._requests, "requests", 1), (self._tokens, "tokens", self._last_est)):
            limit = _number(get_header(headers, f"x-ratelimit-limit-{suffix}"))
            if resource and limit and limit > 0:  # headers speak per minute; our window may be shorter
                resource.lower_limit(limit * self.limits.window_s / 60.0, now)
            remaining = _number(get_header(headers, f"x-ratelimit-remaining-{suffix}"))
            if remaining is not None and remaining < max(need, 1):
                reset = parse_duration(get_header(headers, f"x-ratelimit-reset-{suffix}"))
                self.penalize(1.0 if reset is None else reset)

    def snapshot(self) -> dict[str, Any]:
        now = self.clock()
        return {
            "requests_in_window": self._requests.window.used(now) if self._requests else None,
            "tokens_in_window": self._tokens.window.used(now) if self._tokens else None,
            "rpm": self._requests.window.limit if self._requests else None,
            "tpm": self._tokens.window.limit if self._tokens else None,
            "cooldown_s": max(self.cooldown_until - now, 0.0),
        }


def parse_duration(value: str | None) -> float | None:
    """OpenAI's reset durations ("20ms", "1s", "6m0s", "1h2m3.5s") or plain seconds, in seconds."""
    if not value:
        return None
    number = _number(value)
    if number is not None:
        return number
    parts = _DURATION_PART.findall(value.strip())
    if not parts or "".join(n + u for n, u in parts) != value.strip():
        return None
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(n) * scale[u] for n, u in parts)


def _number(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
