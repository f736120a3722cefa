"""What the rest of a run will cost, from a pilot: a 95% prediction interval for a *total* (pure: numpy only).

A pilot is a simple random sample of n queries run for real; the m queries left are the rest of the same
population. What a plan must bound is their total, m times their mean, which differs from the pilot's mean both by
the pilot's own error and by the spread of the m queries themselves: Var(rest mean - pilot mean) = S^2 (1/n + 1/m).
Trajectory costs are skewed (a few long trajectories, each re-sending a growing conversation, cost most): a
symmetric interval misses high far more often than low, and its lower arm reaches below zero. So the interval is a
bootstrap-t one on the log of the ratio rest mean / pilot mean: the pilot resampled (its mean and spread) against m
draws from the pilot (the rest, in the bootstrap's world); the quantiles of that studentised log ratio
(log(rest/pilot) over the delta-method standard error (s/mean) sqrt(1/n + 1/m)) replace the t quantiles. On the log
scale the interval is a ratio: its lower bound is above zero whenever every pilot query cost something, and its
upper arm is the longer one, as the skew makes it.

No interval can know of a tail its pilot never drew: a pilot that missed the few long trajectories misses the total
high, and nearly every miss is one. bench/plan_pilot.py replays thousands of pilots of a skewed population through
this estimator (coverage by pilot size, for a run and for a sweep whose cells share queries); the default pilot
(run_config.DEFAULT_PILOT, run's and sweep's --pilot) is a size at which the 95% interval held the real total at
least 90% of the time there. Below MIN_PILOT queries there is no interval at all (a spread from 2-4 values says
nothing of a tail): the estimate comes with the reason instead; so does a pilot whose queries all came out the same.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

MIN_PILOT = 5  # fewer pilot queries give an estimate and no interval
SMALL_PILOT = 40  # below it an interval is said to be rough: the benchmark's coverage falls under 90%
LEVEL = 0.95
DRAWS = 4000
EXACT_REST = 4000  # up to this many remaining queries each bootstrap draws them one by one; beyond, their mean
NO_SPREAD = "every pilot query came out the same: no spread to bound the rest with"


class Interval(NamedTuple):
    """An estimate and its interval; `low` and `high` are None when there is none, and `why` says why."""

    estimate: float
    low: float | None
    high: float | None
    why: str = ""

    def scaled(self, k: float) -> Interval:
        return Interval(self.estimate * k, *(None if v is None else v * k for v in (self.low, self.high)), self.why)

    def as_dict(self, digits: int = 4) -> dict[str, float | str | None]:
        """Rounded to `digits` decimals, never a positive figure rounded to zero (3 significant digits then)."""
        out: dict[str, float | str | None] = {k: _round(getattr(self, k), digits) for k in ("estimate", "low", "high")}
        if self.why:
            out["no_interval"] = self.why
        return out


def _round(v: float | None, digits: int) -> float | None:
    if v is None or v == 0 or abs(v) >= 10 ** (2 - digits):
        return None if v is None else round(v, digits)
    return float(f"{v:.3g}")


def no_interval(values: Sequence[float]) -> str:
    """Why a pilot of `values` gives no interval ("" when it gives one)."""
    if len(values) < MIN_PILOT:
        return f"a pilot of {len(values)} queries is too few to bound the rest (an interval needs {MIN_PILOT})"
    return NO_SPREAD if min(values) == max(values) else ""


def rest_draws(values: Sequence[float], m: int, *, draws: int = DRAWS, seed: int = 0) -> np.ndarray:
    """`draws` draws of the total of `m` more values, from the bootstrap-t distribution of the log ratio rest mean /
    pilot mean (module docstring); the pilot must have an interval (`no_interval(values)` is "")."""
    x = np.asarray(values, dtype=float)
    n, mean, s = len(x), float(x.mean()), float(x.std(ddof=1))
    rng = np.random.default_rng(seed)
    boot = x[rng.integers(0, n, size=(draws, n))]
    tiny = np.finfo(float).tiny  # a zero mean (a pilot with zero costs) is a ratio of zero: a very negative t
    b_mean = np.maximum(boot.mean(axis=1), tiny)
    # a resample of (nearly) equal values would give t = inf: its relative spread is floored at a quarter of the
    # pilot's (at a tenth, a pilot of 5 gave upper bounds of 1,000 times the total, no better coverage)
    b_cv = np.maximum(boot.std(axis=1, ddof=1) / b_mean, 0.25 * s / mean)
    if m <= EXACT_REST:
        rest = np.empty(draws)
        for i in range(0, draws, 256):  # bounded memory: 256 x m indices at a time
            k = min(256, draws - i)
            rest[i : i + k] = x[rng.integers(0, n, size=(k, m))].mean(axis=1)
    else:  # the mean of many draws is normal to well within the bootstrap's own error
        rest = np.maximum(mean + rng.standard_normal(draws) * float(x.std(ddof=0)) / math.sqrt(m), 0.0)
    c = math.sqrt(1 / n + 1 / m)
    t = np.log(np.maximum(rest, tiny) / b_mean) / (b_cv * c)
    return m * mean * np.exp(np.clip(t, -700, 700) * (s / mean) * c)


def interval_of(estimate: float, draws: np.ndarray, level: float = LEVEL) -> Interval:
    """The equal-tailed `level` interval of `draws` around `estimate`."""
    low, high = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
    return Interval(estimate, float(low), float(high))


def predict_total(
    values: Sequence[float], m: int, *, level: float = LEVEL, draws: int = DRAWS, seed: int = 0
) -> Interval:
    """Estimate and `level` prediction interval of the sum of `m` more values of the population the pilot
    `values` is a random sample of; no interval (the estimate and why) under MIN_PILOT values or without spread."""
    if m <= 0:
        return Interval(0.0, 0.0, 0.0)
    if not values:
        raise ValueError("a plan needs at least one finished pilot query")
    estimate = m * float(np.mean(values))
    if why := no_interval(values):
        return Interval(estimate, None, None, why)
    return interval_of(estimate, rest_draws(values, m, draws=draws, seed=seed), level)


def paired_total(groups: Sequence[tuple[Sequence[float], int]], *, level: float = LEVEL, seed: int = 0) -> Interval:
    """The total over independent groups, each (per-query values summed over the cells sharing those queries, the
    queries left): a group's queries are resampled once for all its cells, so their errors move together; groups
    draw independently and their draws add."""
    estimate = sum(m * float(np.mean(v)) for v, m in groups if m > 0)
    why = next((w for v, m in groups if m > 0 and (w := no_interval(v))), "")
    if why:
        return Interval(estimate, None, None, why)
    total = np.zeros(DRAWS)
    for i, (v, m) in enumerate(groups):
        if m > 0:
            total += rest_draws(v, m, seed=seed + i)
    return interval_of(estimate, total, level) if estimate else Interval(0.0, 0.0, 0.0)


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
    if cost.low is None or cost.high is None:
        return False  # no interval: the plan says why instead
    return n < SMALL_PILOT or (cost.estimate > 0 and cost.high - cost.low > cost.estimate)
