"""Progress of long work, the same for every command: a bar on a terminal, a line every N seconds everywhere else.

A `ray job submit` log or a file that stdout/stderr is redirected to is not a terminal: a tqdm bar there is either
hidden (then a 1M-document job looks dead for hours) or a wall of carriage returns. So off a terminal a background
thread prints one line every `every_s` seconds (default 30, `--progress-every`): done/total, rate, ETA, dollars so
far and, where they apply, retries and 429s. The first line comes only after the first interval, so a short run
stays quiet; a run that printed lines prints one more as it ends, so its log ends on the real count. The thread only
reads counters; the work updates them.

Work an earlier run did is told apart ("57 before this run"); where dollars were spent before this run or a cap
applies, the line gives the total, this run's share, the cap and the total projected at this run's cost per unit
("$1.2000 ($0.4000 this run) of $4.00 cap, projected $3.6000").
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any

DEFAULT_EVERY_S = 30.0
_every_s = DEFAULT_EVERY_S


def set_progress_every(seconds: float | None) -> None:
    """The process-wide interval of progress lines (`--progress-every`); None keeps the default."""
    global _every_s
    if seconds is not None:
        if not seconds > 0:
            raise ValueError(f"--progress-every must be a positive number of seconds, not {seconds}")
        _every_s = float(seconds)


def progress_every() -> float:
    return _every_s


def duration(seconds: float) -> str:
    """12s, 4m05s, 3h07m: short enough for a log line."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class Progress:
    """Counts `unit` (plural: docs, rows) of `what` done out of `total` (0: unknown), shown where the output goes.

    `update(n, cost=..., retries=..., rate_limited=...)` adds to the counters, shown with `show_cost` and
    `show_transport`; `stage` names a phase that has no count of its own (the index's merge); `extra()` adds
    `key=value` fields of the caller's (running queries).
    `already` are units done by an earlier run: shown in done/total, left out of the rate.
    `item(key, ...)` takes where one item of work stands (a shard's documents so far, as its worker reports them)
    and adds only what goes past what was already shown for it.
    """

    def __init__(
        self,
        what: str,
        total: int = 0,
        unit: str = "docs",
        *,
        enabled: bool = True,
        already: int = 0,
        every_s: float | None = None,
        extra: Callable[[], Mapping[str, Any]] | None = None,
        show_cost: bool = False,
        show_transport: bool = False,
        prefix: str = "rise-batch",
        spent_before: float = 0.0,
        cap: float | None = None,
        project: bool = False,
    ) -> None:
        """`spent_before`: dollars spent before this run (its cost is added to them); `cap`: the limit they are under
        (--max-cost); `project`: show the total projected at this run's dollars per unit (needs `total`)."""
        self.what, self.total, self.unit, self.prefix = what, total, unit, prefix
        self.already, self.done = already, 0
        self.cost, self.retries, self.rate_limited = 0.0, 0, 0
        self.run_cost = 0.0  # this run's own dollars (`cost` also holds what resumed items had spent before)
        self.spent_before, self.cap, self.project = spent_before, cap, project
        self.show_cost, self.show_transport, self.extra, self.stage = show_cost, show_transport, extra, ""
        self.items: dict[Hashable, tuple[int, int, float]] = {}  # key -> (done, earlier, cost) shown for it
        self.every_s = every_s if every_s is not None else _every_s
        self.t0 = time.monotonic()
        self.tty = enabled and sys.stderr.isatty()
        self.bar = None
        if self.tty:
            from tqdm import tqdm

            self.bar = tqdm(total=total or None, initial=already, desc=what, unit=unit)
        self._stop = threading.Event()
        self._printed = False
        self._thread = None
        if enabled and not self.tty:
            self._thread = threading.Thread(target=self._tick, name=f"progress-{what}", daemon=True)
            self._thread.start()

    def update(self, n: int = 1, *, cost: float = 0.0, retries: int = 0, rate_limited: int = 0) -> None:
        self.done += n
        self.cost += cost
        self.run_cost += cost
        self.retries += retries
        self.rate_limited += rate_limited
        if self.bar is not None:
            self.bar.update(n)
            if cost or retries or rate_limited or self.extra is not None:
                self.bar.set_postfix_str(self._fields(), refresh=False)

    def earlier(self, n: int, *, cost: float = 0.0) -> None:
        """`n` units an earlier, interrupted run did (a resumed shard): counted in done/total and in the dollars,
        left out of the rate and so of the ETA, which would otherwise promise minutes for hours of work left."""
        self.already += n
        self.cost += cost
        if self.bar is not None:
            self.bar.update(n)

    def item(self, key: Hashable, done: int, *, earlier: int = 0, cost: float = 0.0) -> None:
        """Item `key` has `done` units of this run's and `earlier` of an earlier run's behind it, and cost `cost`.

        Workers report these counts every few seconds while they run an item, and the item's final stats close it.
        Only what goes past the most shown for the key so far is added: a report that arrives late, one repeated,
        or the counts of an item redone from the start after its worker died (they climb from zero again) never
        count a unit or a dollar twice, so the line never passes the real total and ends on it. Units the shown
        count already covers are not moved between this run's and the earlier run's (the rate can lag; the count
        cannot lie)."""
        shown_done, shown_earlier, shown_cost = self.items.get(key, (0, 0, 0.0))
        grown = max(0, done + earlier - shown_done - shown_earlier)
        add_earlier = min(grown, max(0, earlier - shown_earlier))
        add_cost = max(0.0, cost - shown_cost)
        self.items[key] = (shown_done + grown - add_earlier, shown_earlier + add_earlier, shown_cost + add_cost)
        if add_earlier:
            self.earlier(add_earlier)
        if grown - add_earlier or add_cost:
            self.update(grown - add_earlier, cost=add_cost)

    def set_stage(self, stage: str) -> None:
        self.stage = stage
        if self.bar is not None:
            self.bar.set_description_str(f"{self.what} ({stage})" if stage else self.what)

    def line(self) -> str:
        """`structure: 1,200/27,000 docs (4%) 24.1 docs/s ETA 18m40s $0.0312 retries=3 429s=1`."""
        count = self.already + self.done
        elapsed = max(time.monotonic() - self.t0, 1e-9)
        rate = self.done / elapsed
        parts = [f"{self.what}:"]
        if self.total:
            before = f"; {self.already:,} before this run" if self.already else ""
            parts.append(f"{count:,}/{self.total:,} {self.unit} ({100 * count // max(self.total, 1)}%{before})")
        else:  # unknown total: no ETA, but the time spent says the work is alive
            parts.append(f"{count:,} {self.unit} (elapsed {duration(elapsed)})")
        if self.stage:  # a phase without a count of its own: its rate would only decay
            parts.append(f"{self.stage} (elapsed {duration(elapsed)})")
        else:
            parts.append(f"{rate:,.1f} {self.unit}/s")
            if self.total:
                parts.append(f"ETA {duration(max(self.total - count, 0) / rate)}" if rate > 0 else "ETA ?")
        fields = self._fields()
        return " ".join(parts) + (f" {fields}" if fields else "")

    def projected(self) -> float | None:
        """The total dollars once every unit is done, at this run's dollars per unit so far (None before this run
        finished a unit, or without a total)."""
        if not (self.project and self.total and self.done):
            return None
        left = max(self.total - self.already - self.done, 0)
        return self.spent_before + self.cost + self.run_cost / self.done * left

    def money(self) -> str:
        """`$0.0312`, or with dollars spent before or a cap: `$1.2000 ($0.4000 this run) of $4.00 cap, projected
        $3.6000`."""
        if not (self.spent_before or self.cap is not None or self.project):
            return f"${self.cost:.4f}"
        text = f"${self.spent_before + self.cost:.4f}"
        if self.spent_before:
            text += f" (${self.cost:.4f} this run)"
        if self.cap is not None:
            text += f" of ${self.cap:.2f} cap"
        projected = self.projected()
        return text + (f", projected ${projected:.4f}" if projected is not None else "")

    def _fields(self) -> str:
        out = [self.money()] if self.show_cost else []
        if self.show_transport:  # only where they are counted: a 0 must mean none, not "not measured"
            out += [f"retries={self.retries}", f"429s={self.rate_limited}"]
        if self.extra is not None:
            out += [f"{k}={v}" for k, v in self.extra().items()]
        return " ".join(out)

    def _tick(self) -> None:
        while not self._stop.wait(self.every_s):
            print(f"{self.prefix} {self.line()}", file=sys.stderr, flush=True)
            self._printed = True

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            if self._printed:  # the last tick may be up to every_s old: end on where the work ended
                print(f"{self.prefix} {self.line()}", file=sys.stderr, flush=True)
        if self.bar is not None:
            self.bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
