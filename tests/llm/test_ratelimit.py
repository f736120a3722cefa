"""The pure limiter's arithmetic on a fake clock: the per-window guarantee, smoothing, true-up, cool-down."""

from __future__ import annotations

import bisect

from hypothesis import given, settings
from hypothesis import strategies as st

from rise_batch.llm.ratelimit import Lease, RateLimiter, RateLimits, SlidingWindow, parse_duration


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def run_greedy(limiter: RateLimiter, clock: FakeClock, sizes: list[int]) -> list[tuple[float, int]]:
    """Grant `sizes` one after another as fast as the limiter allows, sleeping exactly as told."""
    grants = []
    for size in sizes:
        while True:
            got = limiter.reserve(size)
            if isinstance(got, Lease):
                grants.append((clock.t, size))
                break
            assert got > 0
            clock.t += got
    return grants


def max_in_any_window(grants: list[tuple[float, int]], window: float, weight: bool) -> float:
    times = [t for t, _ in grants]
    best = 0.0
    for i, (t, _) in enumerate(grants):  # a worst window starts at some grant
        j = bisect.bisect_left(times, t + window)
        best = max(best, sum(a if weight else 1 for _, a in grants[i:j]))
    return best


def test_requests_never_exceed_rpm_in_any_window() -> None:
    clock = FakeClock()
    limiter = RateLimiter(RateLimits(rpm=120), clock)
    grants = run_greedy(limiter, clock, [10] * 600)
    assert max_in_any_window(grants, 60.0, weight=False) <= 120
    # and the limit is used, not just respected: 600 requests at 120/min take about 5 minutes
    assert 4 * 60 <= grants[-1][0] - grants[0][0] <= 5 * 60


def test_smoothing_spreads_grants_instead_of_bursting_the_window() -> None:
    clock = FakeClock()
    limiter = RateLimiter(RateLimits(rpm=600, burst_s=1.0), clock)
    grants = run_greedy(limiter, clock, [1] * 100)
    # 10/s refill with a 10-request bucket: at most 20 in the first second, then 10 per second
    assert max_in_any_window(grants, 1.0, weight=False) <= 20
    window_only = RateLimiter(RateLimits(rpm=600, burst_s=None), clock)
    assert len(run_greedy(window_only, clock, [1] * 100)) == 100
    assert window_only.snapshot()["requests_in_window"] == 100  # all at once: the window alone allows bursts


@settings(max_examples=60, deadline=None)
@given(
    rpm=st.integers(1, 50),
    tpm=st.integers(500, 5000),
    sizes=st.lists(st.integers(1, 500), min_size=1, max_size=120),  # none above tpm: those go alone, by design
    burst=st.sampled_from([None, 0.5, 2.0]),
)
def test_tokens_and_requests_stay_within_limits(rpm: int, tpm: int, sizes: list[int], burst: float | None) -> None:
    clock = FakeClock()
    limiter = RateLimiter(RateLimits(rpm=rpm, tpm=tpm, burst_s=burst), clock)
    grants = run_greedy(limiter, clock, sizes)
    assert len(grants) == len(sizes)
    assert max_in_any_window(grants, 60.0, weight=False) <= rpm
    assert max_in_any_window(grants, 60.0, weight=True) <= tpm


def test_oversized_request_goes_alone_instead_of_deadlocking() -> None:
    clock = FakeClock()
    limiter = RateLimiter(RateLimits(tpm=1000), clock)
    grants = run_greedy(limiter, clock, [600, 5000, 600])
    assert len(grants) == 3
    assert grants[1][0] >= grants[0][0] + 60  # waited for the window to empty
    assert grants[2][0] >= grants[1][0] + 60


def test_settle_trues_up_the_reservation() -> None:
    clock = FakeClock()
    limiter = RateLimiter(RateLimits(tpm=1000, burst_s=None), clock)
    lease = limiter.reserve(900)
    assert isinstance(lease, Lease)
    assert limiter.reserve(200) > 0  # 900 + 200 > 1000
    limiter.settle(lease, 100)  # the reply used far less than estimated
    assert isinstance(limiter.reserve(200), Lease)
    assert limiter.snapshot()["tokens_in_window"] == 300
    lease = limiter.reserve(100)
    limiter.settle(lease, 700)  # and far more: later reservations wait for it
    assert limiter.snapshot()["tokens_in_window"] == 1000
    assert limiter.reserve(1) > 0
    limiter.settle(lease, 700)  # settling twice changes nothing
    assert limiter.snapshot()["tokens_in_window"] == 1000


def test_settle_after_the_window_moved_on_is_harmless() -> None:
    clock = FakeClock()
    limiter = RateLimiter(RateLimits(tpm=1000), clock)
    lease = limiter.reserve(500)
    clock.t += 61
    limiter.settle(lease, 900)
    assert limiter.snapshot()["tokens_in_window"] == 0


def test_penalize_sets_a_global_cooldown() -> None:
    clock = FakeClock()
    limiter = RateLimiter(RateLimits(rpm=1000), clock)
    assert isinstance(limiter.reserve(1), Lease)
    limiter.penalize(5.0)
    limiter.penalize(2.0)  # a shorter overlapping penalty does not shorten it
    assert limiter.reserve(1) == 5.0
    clock.t += 4.0
    assert limiter.reserve(1) == 1.0
    clock.t += 1.0
    assert isinstance(limiter.reserve(1), Lease)


def test_unlimited_limiter_always_grants() -> None:
    limiter = RateLimiter(RateLimits(), FakeClock())
    leases = [limiter.reserve(10**9) for _ in range(1000)]
    assert all(isinstance(x, Lease) for x in leases)
    assert len({x.id for x in leases}) == 1000


def test_headers_lower_limits_and_pause_at_zero_remaining() -> None:
    clock = FakeClock()
    limiter = RateLimiter(RateLimits(rpm=600, tpm=100_000, adapt=True), clock)
    limiter.observe({"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "59"})
    assert limiter.snapshot()["rpm"] == 60
    limiter.observe({"X-RateLimit-Remaining-Requests": "0", "X-RateLimit-Reset-Requests": "1m30s"})
    assert limiter.reserve(1) == 90.0
    ignoring = RateLimiter(RateLimits(rpm=600), clock)
    ignoring.observe({"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "0"})
    assert ignoring.snapshot()["rpm"] == 600 and isinstance(ignoring.reserve(1), Lease)


def test_header_limit_is_scaled_to_a_short_window() -> None:
    limiter = RateLimiter(RateLimits(rpm=100, window_s=6.0, adapt=True), FakeClock())
    limiter.observe({"x-ratelimit-limit-requests": "1200"})  # 1200/min = 120 per 6 s: not lower than 100
    assert limiter.snapshot()["rpm"] == 100
    limiter.observe({"x-ratelimit-limit-requests": "600"})
    assert limiter.snapshot()["rpm"] == 60


def test_sliding_window_wait_is_exact() -> None:
    window = SlidingWindow(limit=3, window_s=10.0)
    for t in (0.0, 1.0, 2.0):
        window.add(t, 1)
    assert window.wait(2.5, 1) == 7.5  # the first grant leaves at t=10
    assert window.wait(2.5, 2) == 8.5
    assert window.wait(10.0, 1) == 0.0


def test_parse_duration() -> None:
    assert parse_duration("20ms") == 0.02
    assert parse_duration("6m0s") == 360.0
    assert parse_duration("1h2m3.5s") == 3723.5
    assert parse_duration("1.5") == 1.5
    assert parse_duration("soon") is None
    assert parse_duration(None) is None


def test_rate_limits_validate() -> None:
    import pytest

    with pytest.raises(ValueError, match="rpm"):
        RateLimits(rpm=0)
    with pytest.raises(ValueError, match="window_s"):
        RateLimits(window_s=0)
