"""Run metrics on a hand-built run directory, and calibration error against hand-computed cases."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rise_batch.eval.metrics import bootstrap_ci, calibration_bins, calibration_error, gold_fraction, run_metrics
from rise_batch.eval.rundir import load_run
from tests.eval.helpers import known_run, trajectory, write_run


def test_metrics_of_a_known_run(tmp_path: Path) -> None:
    run = load_run(known_run(tmp_path / "run"))
    m = run_metrics(run.meta, run.trajectories, run.judgments)
    assert (m["system"], m["model"], m["k"]) == ("rise", "gpt-5.4-nano", 1000)
    assert (m["n_queries"], m["n_judged"], m["n_correct"]) == (5, 5, 2)
    assert m["accuracy"] == pytest.approx(0.4)
    lo, hi = m["accuracy_ci95"]
    assert 0.0 <= lo <= 0.4 <= hi <= 1.0
    assert m["no_answers"] == 2
    assert m["no_answers_by_stop_reason"] == {"max_calls": 1, "wall_clock": 1}
    assert m["stop_reasons"] == {"answered": 3, "max_calls": 1, "wall_clock": 1}
    # model calls 7, 4, 100, 5, 2
    assert m["model_calls"] == {"mean": pytest.approx(23.6), "median": 5.0}
    # tool calls per query 6, 3, 15, 2, 0
    assert m["tool_calls_per_query"] == [6, 3, 15, 2, 0]
    assert m["tool_calls"] == {"mean": pytest.approx(5.2), "median": 3.0}
    assert m["tool_calls_by_tool"]["search"]["mean"] == pytest.approx(1.8)
    assert m["tool_calls_by_tool"]["bash"]["mean"] == pytest.approx(2.6)
    assert m["tool_calls_by_tool"]["read"] == {"mean": pytest.approx(0.8), "median": 1.0}
    assert m["agent_usd_per_query"] == pytest.approx(0.085 / 5)
    assert m["judge_usd_per_query"] == pytest.approx(0.003 / 5)
    # gold_R: 2/2, 0/1, 1/1, 1/1 (q5 has no gold); cov: 1/2, 0/1, 1/1, 0/1
    assert m["n_with_gold"] == 4
    assert m["gold_R"] == pytest.approx(0.75)
    assert m["cov_mean"] == pytest.approx(0.375)
    assert m["workspace_docs"] == {"mean": pytest.approx(3.2), "median": 2.0}
    # calibration over the three answered queries: confidences .9 .6 .8 (mean .7667), accuracy 2/3 -> gap 0.1
    assert m["n_calibration"] == 3
    assert m["calibration_error"] == pytest.approx(0.1)
    assert m["judge_methods"] == {"empty": 2, "exact": 1, "llm": 2}


def test_unjudged_queries_are_left_out_of_accuracy_and_a_run_without_search_has_no_gold_r(tmp_path: Path) -> None:
    t = [
        trajectory(
            "a", system="dci", exact_answer="x", gold_doc_ids=["g"], surfaced_docids=["g"], tool_calls={"bash": 1}
        ),
        trajectory("b", system="dci", exact_answer="y", gold_doc_ids=["h"], tool_calls={"read": 2}),
    ]
    run = load_run(write_run(tmp_path / "r", t, {"a": {"correct": True, "method": "llm", "confidence": 100}}))
    m = run_metrics(run.meta, run.trajectories, run.judgments)
    assert (m["n_queries"], m["n_judged"], m["accuracy"]) == (2, 1, 1.0)
    assert m["gold_R"] is None and m["cov_mean"] == pytest.approx(0.5)
    assert m["accuracy_ci95"] == pytest.approx((0.2065, 1.0), abs=1e-4)  # Wilson: 1 of 1 says little


def test_empty_run() -> None:
    m = run_metrics({}, {}, {})
    assert m["accuracy"] is None and m["accuracy_ci95"] is None and m["calibration_error"] is None


def _dropping_last_bin(conf: list[float], correct: list[bool], beta: int = 100) -> float:
    """How the reference script sums: the same bins, but the last one is left out of the sum."""
    bins = calibration_bins(conf, correct, beta)
    n = len(conf)
    return math.sqrt(sum(b["n"] / n * (b["confidence"] - b["accuracy"]) ** 2 for b in bins[:-1]))


def test_calibration_below_200_answers_is_not_zero() -> None:
    # 150 answers, all at 80% confidence, 60 right: one bin of 150, |0.8 - 0.4| = 0.4
    conf, correct = [80.0] * 150, [True] * 60 + [False] * 90
    assert calibration_bins(conf, correct) == [{"n": 150, "confidence": 0.8, "accuracy": 0.4}]
    assert calibration_error(conf, correct) == pytest.approx(0.4)
    assert calibration_error(conf, correct, norm="l1") == pytest.approx(0.4)
    assert _dropping_last_bin(conf, correct) == 0.0  # what the reference reports


def test_calibration_over_all_bins_with_a_remainder() -> None:
    # 250 answers: 100 at 20% all wrong (gap .2), then 150 at 90% with 90 right (acc .6, gap .3); the remainder
    # of 50 joins the last bin. l2 = sqrt(.4*.04 + .6*.09) = sqrt(.07); l1 = .4*.2 + .6*.3 = .26
    conf = [90.0] * 150 + [20.0] * 100
    correct = [True] * 90 + [False] * 60 + [False] * 100
    bins = calibration_bins(conf, correct)
    assert [b["n"] for b in bins] == [100, 150]
    assert calibration_error(conf, correct) == pytest.approx(math.sqrt(0.07))
    assert calibration_error(conf, correct, norm="l1") == pytest.approx(0.26)
    assert _dropping_last_bin(conf, correct) == pytest.approx(math.sqrt(0.016))


def test_calibration_small_bins_hand_computed() -> None:
    # bins of 4 over 10 answers: [10..40] conf .25 acc 1/4 (gap 0); [50..100] conf .75 acc 5/6 (gap 1/12)
    conf = [100, 10, 90, 20, 80, 30, 70, 40, 60, 50]
    correct = [True, False, True, False, True, True, False, False, True, True]
    bins = calibration_bins([float(c) for c in conf], correct, bin_size=4)
    assert [b["n"] for b in bins] == [4, 6]
    assert bins[0]["accuracy"] == pytest.approx(0.25) and bins[0]["confidence"] == pytest.approx(0.25)
    assert bins[1]["accuracy"] == pytest.approx(5 / 6) and bins[1]["confidence"] == pytest.approx(0.75)
    assert calibration_error([float(c) for c in conf], correct, bin_size=4) == pytest.approx(math.sqrt(0.6 / 144))
    with pytest.raises(ValueError):
        calibration_error([1.0], [True, False])


def test_bootstrap_is_reproducible_and_brackets_the_mean() -> None:
    outcomes = [True] * 30 + [False] * 70
    ci = bootstrap_ci(outcomes)
    assert ci == bootstrap_ci(outcomes) and ci is not None
    lo, hi = ci
    assert lo < 0.3 < hi and 0.15 < lo and hi < 0.45  # about +-9 points at n=100
    assert bootstrap_ci([]) is None


def test_gold_fraction() -> None:
    assert gold_fraction(["a", "b", "b"], ["b", "c"]) == 0.5
    assert gold_fraction([], ["x"]) is None


@pytest.mark.parametrize("n", [830, 1200, 1201])
def test_bootstrap_median_drawn_directly_matches_resampling(n: int) -> None:
    """Above DIRECT_MEDIAN_ABOVE values the bootstrap median is drawn from the order statistics' distribution
    instead of sorting every resample (3 s at 10,000 values): the interval is the same, within sampling noise."""
    import numpy as np

    from rise_batch.eval import metrics

    values = list(np.random.default_rng(n).uniform(0, 1, n))
    assert n > metrics.DIRECT_MEDIAN_ABOVE
    direct = bootstrap_ci(values, statistic="median", samples=4000)
    saved = metrics.DIRECT_MEDIAN_ABOVE
    metrics.DIRECT_MEDIAN_ABOVE = 10**9
    try:
        resampled = bootstrap_ci(values, statistic="median", samples=4000)
    finally:
        metrics.DIRECT_MEDIAN_ABOVE = saved
    assert direct == pytest.approx(resampled, abs=0.005)  # the interval is ~0.055 wide
    assert direct[0] < float(np.median(values)) < direct[1]
