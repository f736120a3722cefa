"""What the rest of a run will cost, from a pilot: a 95% prediction interval for a *total* (pure: numpy only).

A pilot is a simple random sample of n queries run for real; the m queries left are the rest of the same
population. What a plan must bound is their total, m times their mean, which differs from the pilot's mean both by
the pilot's own error and by the spread of the m queries themselves: Var(rest mean - pilot mean) = S^2 (1/n + 1/m).
Trajectory costs are skewed (a few long trajectories, each re-sending a growing conversation, cost most), and a
symmetric t interval over skewed data misses high far more often than low. So the interval is a bootstrap-t one:
the pilot resampled (its mean and spread) against m draws from the pilot (the rest, in the bootstrap's world); the
quantiles of that studentised difference replace the t quantiles, which carries the skew into the interval (a long
upper arm). The benchmark bench/plan_pilot.py checks its coverage against real totals.

No interval can know of a tail its pilot never drew: a pilot that missed the few long trajectories misses the
total high. bench/plan_pilot.py measured the 95% interval holding the real total 85% of the time with 10 pilot
queries, 88% with 20, 90% with 40 and 94% with 80 (300 queries of skewed cost; the symmetric t interval: 75, 81, 85,
90%). So a pilot below SMALL_PILOT queries, or an interval wider than the estimate itself, is said to be rough.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

SMALL_PILOT = 40  # below it the measured coverage of the 95% interval is under 90% (module docstring)
LEVEL = 0.95
DRAWS = 4000
EXACT_REST = 4000  # up to this many remaining queries each bootstrap draws them one by one; beyond, their mean


class Interval(NamedTuple):
    estimate: float
    low: float
    high: float

    def scaled(self, k: float) -> Interval:
        return Interval(self.estimate * k, self.low * k, self.high * k)

    def as_dict(self, digits: int = 4) -> dict[str, float]:
        return {k: round(v, digits) for k, v in self._asdict().items()}


def predict_total(
    values: Sequence[float], m: int, *, level: float = LEVEL, draws: int = DRAWS, seed: int = 0
) -> Interval:
    """Estimate and `level` prediction interval of the sum of `m` more values of the population the pilot
    `values` is a random sample of. A pilot of one value, or of equal ones, gives the estimate as its interval."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    if m <= 0:
        return Interval(0.0, 0.0, 0.0)
    if n == 0:
        raise ValueError("a plan needs at least one finished pilot query")
    mean = float(x.mean())
    s = float(x.std(ddof=1)) if n > 1 else 0.0
    if s == 0.0:
        return Interval(m * mean, m * mean, m * mean)
    rng = np.random.default_rng(seed)
    boot = x[rng.integers(0, n, size=(draws, n))]
    b_mean = boot.mean(axis=1)
    b_sd = np.maximum(boot.std(axis=1, ddof=1), 0.1 * s)  # a resample of equal values would give t = inf
    if m <= EXACT_REST:
        rest = np.empty(draws)
        for i in range(0, draws, 256):  # bounded memory: 256 x m indices at a time
            k = min(256, draws - i)
            rest[i : i + k] = x[rng.integers(0, n, size=(k, m))].mean(axis=1)
    else:  # the mean of many draws is normal to well within the bootstrap's own error
        rest = mean + rng.standard_normal(draws) * float(x.std(ddof=0)) / math.sqrt(m)
    c = math.sqrt(1 / n + 1 / m)
    t = (rest - b_mean) / (b_sd * c)
    lo_t, hi_t = np.quantile(t, [(1 - level) / 2, (1 + level) / 2])
    low = max(mean + float(lo_t) * s * c, 0.0)
    high = mean + float(hi_t) * s * c
    return Interval(m * mean, m * low, m * high)


def t_interval(values: Sequence[float], m: int, level: float = LEVEL) -> Interval:
    """The symmetric t prediction interval for the same total (the benchmark's baseline: it ignores skew)."""
    from statistics import NormalDist

    x = np.asarray(values, dtype=float)
    n, mean = len(x), float(np.mean(values))
    s = float(x.std(ddof=1)) if n > 1 else 0.0
    q = NormalDist().inv_cdf((1 + level) / 2) * (1 + 1 / max(n - 1, 1))  # ~t quantile (Cornish-Fisher, 1 term)
    half = q * s * math.sqrt(1 / n + 1 / m) if m else 0.0
    return Interval(m * mean, m * max(mean - half, 0.0), m * (mean + half))


def pilot_sample(ids: Sequence[str], n: int, seed: int = 0) -> list[str]:
    """A seeded simple random sample of `n` of `ids` (all of them when there are fewer), in their order: the same
    flags pick the same pilot, so a second --plan or the run after it finds the pilot's trajectories done."""
    if n >= len(ids):
        return list(ids)
    chosen = set(random.Random(seed).sample(range(len(ids)), n))
    return [q for i, q in enumerate(ids) if i in chosen]


def is_small(n: int, cost: Interval) -> bool:
    """Is the interval a rough one: a pilot below SMALL_PILOT, or an interval wider than the estimate."""
    return n < SMALL_PILOT or (cost.estimate > 0 and cost.high - cost.low > cost.estimate)
