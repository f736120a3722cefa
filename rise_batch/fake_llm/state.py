"""The fake server's memory: settings, per-key attempt counts, the prompt cache, its own rate limits, the log.

Everything a test may want to assert on lives here, behind one lock, because the HTTP server answers on many
threads. The request log records arrival times, so a test can check from the server's side of the wire that a
client never went over a requests-per-minute limit.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import Any

from rise_batch.fake_llm.faults import FaultConfig
from rise_batch.llm.pricing import PriceTable
from rise_batch.llm.ratelimit import SlidingWindow


class ServerState:
    def __init__(self, config: FaultConfig, log_limit: int = 1_000_000) -> None:
        self.lock = threading.Lock()
        self.stop = threading.Event()  # set on shutdown: ends hangs and latency sleeps at once
        self.config = config
        self._log_limit = log_limit
        self._prices = PriceTable.load()
        self.reset()

    def reset(self) -> None:
        """Forget everything but the settings (a fresh server for the next test case)."""
        with self.lock:
            self._attempts: dict[str, int] = {}
            self._seen_prefixes: set[int] = set()
            self._log: deque[dict[str, Any]] = deque(maxlen=self._log_limit)
            self._logged = 0
            self._counts: Counter[str] = Counter()
            self._bill = 0.0
            self.in_flight = 0
            self.max_in_flight = 0
            self._new_windows()

    def _new_windows(self) -> None:
        cfg = self.config
        self._requests = SlidingWindow(cfg.rpm_limit, cfg.limit_window_s) if cfg.rpm_limit else None
        self._tokens = SlidingWindow(cfg.tpm_limit, cfg.limit_window_s) if cfg.tpm_limit else None

    def configure(self, changes: dict[str, Any]) -> FaultConfig:
        with self.lock:
            old = self.config
            self.config = old.updated(changes)
            if (old.rpm_limit, old.tpm_limit, old.limit_window_s) != (
                self.config.rpm_limit,
                self.config.tpm_limit,
                self.config.limit_window_s,
            ):
                self._new_windows()
            return self.config

    def begin(self, key: str) -> int:
        """Count a request in; returns its attempt number for `key` (0 for the first time the key is seen)."""
        with self.lock:
            attempt = self._attempts.get(key, 0)
            self._attempts[key] = attempt + 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            return attempt

    def end(self) -> None:
        with self.lock:
            self.in_flight -= 1

    def admit(self, prompt_tokens: Callable[[], int]) -> float:
        """Server-side rate limits: 0 when the request is admitted (and counted), else seconds until it would be.
        `prompt_tokens` is called only under a tokens-per-minute limit: counting a document is most of the server's
        own CPU per request, wasted when nothing reads the count."""
        now = time.monotonic()
        with self.lock:
            tokens = prompt_tokens() if self._tokens else 0
            wait = max(
                self._requests.wait(now, 1) if self._requests else 0.0,
                self._tokens.wait(now, tokens) if self._tokens else 0.0,
            )
            if wait <= 0:
                if self._requests:
                    self._requests.add(now, 1)
                if self._tokens:
                    self._tokens.add(now, tokens)
            return wait

    def ratelimit_headers(self) -> dict[str, str]:
        """x-ratelimit-* as OpenAI sends them (limits per minute), only for the limits this server enforces."""
        now = time.monotonic()
        headers: dict[str, str] = {}
        with self.lock:
            per_minute = 60.0 / self.config.limit_window_s
            for name, window in (("requests", self._requests), ("tokens", self._tokens)):
                if window is None:
                    continue
                used = window.used(now)
                headers[f"x-ratelimit-limit-{name}"] = str(int(window.limit * per_minute))
                headers[f"x-ratelimit-remaining-{name}"] = str(max(int(window.limit - used), 0))
                reset = window.wait(now, window.limit) if used else 0.0
                headers[f"x-ratelimit-reset-{name}"] = f"{int(reset * 1000)}ms"
        return headers

    def cache_hit(self, prefix: str) -> bool:
        """True when this prompt prefix (the system prompt) was served before, as a provider's prompt cache would."""
        h = hash(prefix)
        with self.lock:
            seen = h in self._seen_prefixes
            self._seen_prefixes.add(h)
            return seen

    def record(self, entry: dict[str, Any]) -> None:
        with self.lock:
            entry["i"] = self._logged
            self._logged += 1
            self._log.append(entry)
            c = self._counts
            c["requests"] += 1
            c[f"path:{entry.get('path', '')}"] += 1
            c[f"status:{entry.get('status', 0)}"] += 1
            if entry.get("fault"):
                c[f"fault:{entry['fault']}"] += 1
            for field in ("prompt_tokens", "cached_tokens", "completion_tokens"):
                c[field] += entry.get(field, 0)
            if "prompt_tokens" in entry:  # a reply was generated: billed, whatever it said of its usage
                prompt, cached, output = (
                    entry.get(f, 0) for f in ("prompt_tokens", "cached_tokens", "completion_tokens")
                )
                self._bill += self._prices.cost(str(entry.get("model") or ""), prompt, cached, output)

    def stats(self) -> dict[str, Any]:
        with self.lock:
            c = self._counts

            def group(prefix: str) -> dict[str, int]:
                return {k[len(prefix) :]: v for k, v in sorted(c.items()) if k.startswith(prefix)}

            return {
                "requests": c["requests"],
                "by_status": group("status:"),
                "by_fault": group("fault:"),
                "by_path": group("path:"),
                "prompt_tokens": c["prompt_tokens"],
                "cached_tokens": c["cached_tokens"],
                "completion_tokens": c["completion_tokens"],
                "bill_usd": round(self._bill, 10),  # what a provider would bill, at rise_batch/data/prices.yaml
                "distinct_keys": len(self._attempts),
                "in_flight": self.in_flight,
                "max_in_flight": self.max_in_flight,
                "config": self.config.as_dict(),
            }

    def log(self, since: int = 0) -> list[dict[str, Any]]:
        with self.lock:
            return [dict(e) for e in self._log if e["i"] >= since]
