"""The A/B promotion rule on synthetic repeats whose answer is known."""

import random

import pytest

from parity import stats
from parity.stats import IMPROVED, NOISE, REGRESSED, Rule


def noisy(center, noise_pct, n=5, seed=0):
    """n values around center with a sample stdev of exactly noise_pct % of it."""
    rng = random.Random(seed)
    raw = [rng.gauss(0, 1) for _ in range(n)]
    mean = sum(raw) / n
    sd = (sum((x - mean) ** 2 for x in raw) / (n - 1)) ** 0.5
    return [center * (1 + noise_pct / 100 * (x - mean) / sd) for x in raw]


RULE = Rule(min_delta_pct=2.0, noise_k=3.0, require_consistent_direction=True)


def test_describe_median_stdev_cv():
    s = stats.describe([10, 11, 9, 10, None, float("nan")])
    assert s.n == 4 and s.median == 10 and s.min == 9 and s.max == 11
    assert s.stdev == pytest.approx(0.8165, abs=1e-4)
    assert s.cv_pct == pytest.approx(8.165, abs=1e-3)
    assert stats.describe([5]).stdev is None
    assert stats.describe([]).median is None


def test_ten_percent_with_one_percent_noise_is_improved():
    a = noisy(100, 1.0, seed=1)
    b = [v * 1.10 for v in a]  # every repeat 10% better
    r = stats.compare_samples(a, b, RULE)
    assert r.stdev_pct == pytest.approx(stats.stdev_pct(a))
    assert r.threshold_pct == pytest.approx(max(2.0, 3 * r.stdev_pct))
    assert r.delta_pct == pytest.approx(10.0, abs=0.01)
    assert r.verdict == IMPROVED, r.reason


def test_one_and_a_half_percent_is_within_noise_even_when_clean():
    a = noisy(100, 0.1, seed=2)
    b = [v * 1.015 for v in a]
    r = stats.compare_samples(a, b, RULE)
    assert r.threshold_pct == pytest.approx(2.0)  # the 2% floor, not 3 x 0.1%
    assert r.verdict == NOISE and "<=" in r.reason


def test_five_percent_with_three_percent_noise_is_within_noise():
    a = noisy(100, 3.0, seed=3)
    b = [v * 1.05 for v in a]
    r = stats.compare_samples(a, b, RULE)
    assert r.threshold_pct == pytest.approx(3 * stats.stdev_pct(a)) == pytest.approx(9.0, rel=0.05)
    assert r.verdict == NOISE


def test_regression_beyond_noise():
    a = noisy(200, 0.5, seed=4)
    r = stats.compare_samples(a, [v * 0.9 for v in a], RULE)
    assert r.verdict == REGRESSED and r.delta_pct == pytest.approx(-10, abs=0.01)


def test_lower_is_better_flips_the_sign():
    ttft_a = noisy(50.0, 1.0, seed=5)
    faster = stats.compare_samples(ttft_a, [v * 0.85 for v in ttft_a], RULE, better="lower")
    slower = stats.compare_samples(ttft_a, [v * 1.15 for v in ttft_a], RULE, better="lower")
    assert faster.verdict == IMPROVED and faster.gain_pct > 0 > faster.delta_pct
    assert slower.verdict == REGRESSED and slower.gain_pct < 0 < slower.delta_pct


def test_inconsistent_direction_is_noise_unless_rule_allows():
    a = {0: 100.0, 1: 101.0, 2: 99.0, 3: 100.0, 4: 100.5}
    # the median jumps +10% but repeat 3 moved the other way
    b = {0: 111.0, 1: 112.0, 2: 109.0, 3: 98.0, 4: 110.0}
    r = stats.compare_samples(a, b, RULE)
    assert r.consistent is False and r.verdict == NOISE and "disagree" in r.reason
    lax = stats.compare_samples(a, b, Rule(require_consistent_direction=False))
    assert lax.verdict == IMPROVED


def test_pairing_by_repeat_index():
    # pairs all move up although B's lowest repeat sits below A's highest
    a = {0: 100.0, 1: 110.0, 2: 105.0}
    b = {0: 108.0, 1: 119.0, 2: 114.0}
    r = stats.compare_samples(a, b, Rule(min_delta_pct=2.0, noise_k=0.5), paired=True)
    assert r.consistent is True
    # across sessions repeat i of A has nothing to do with repeat i of B: each B vs A's median
    assert stats.compare_samples(a, b, Rule(min_delta_pct=2.0, noise_k=0.5)).consistent is True
    b2 = {0: 104.0, 1: 119.0, 2: 114.0}
    assert stats.compare_samples(a, b2, Rule(min_delta_pct=2.0, noise_k=0.5)).consistent is False
    assert stats.compare_samples(a, b2, Rule(min_delta_pct=2.0, noise_k=0.5), paired=True).consistent is True


def test_floor_run_stdev_raises_the_threshold():
    a = noisy(100, 0.5, seed=6)
    b = [v * 1.06 for v in a]
    assert stats.compare_samples(a, b, RULE).verdict == IMPROVED
    floor = noisy(100, 2.5, n=7, seed=7)  # same binary, noisier session: 3 x 2.5 = 7.5% > 6%
    r = stats.compare_samples(a, b, RULE, floor_values=floor)
    assert r.noise_source == "noise-floor run" and r.threshold_pct == pytest.approx(7.5, rel=0.05)
    assert r.verdict == NOISE


def test_single_repeat_has_no_noise_estimate():
    r = stats.compare_samples([100.0], [150.0], RULE)
    assert r.verdict == NOISE and "noise estimate" in r.reason
    # a floor run supplies it
    r2 = stats.compare_samples([100.0], [150.0], RULE, floor_values=noisy(100, 1.0))
    assert r2.verdict == IMPROVED


def test_missing_values():
    r = stats.compare_samples([], [1.0, 2.0], RULE)
    assert r.verdict == NOISE and r.delta_pct is None


def test_shift_ci_matches_mann_whitney_tables():
    # n = m = 5 at 95%: critical U = 2, so the CI is the 3rd smallest/largest difference
    a = [1.0, 2.0, 3.0, 4.0, 5.0]
    b = [11.0, 12.0, 13.0, 14.0, 15.0]
    est, lo, hi = stats.shift_ci(a, b, 0.95)
    diffs = sorted(y - x for x in a for y in b)
    assert est == 10.0 and lo == diffs[2] and hi == diffs[-3]
    assert stats.shift_ci([1.0, 2.0], [3.0, 4.0], 0.95) is None  # 2 vs 2 cannot reach 95%
    assert sum(stats._u_counts(5, 5)) == 252


def test_overall():
    assert stats.overall([NOISE, IMPROVED]) == IMPROVED
    assert stats.overall([IMPROVED, REGRESSED]) == REGRESSED
    assert stats.overall([NOISE]) == NOISE
