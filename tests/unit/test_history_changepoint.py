"""The change-point detector (parity.history.changepoint): its divergence against the paper's
formula written out, its best split against ruptures' binary segmentation with the same energy
cost (an independent implementation), and its answers on plain cases.  Its agreement with Apache
Otava's own output is tests/unit/test_history_otava.py."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from parity.history import changepoint as cp


def q_naive(z, s, tau, kappa):
    """Q-hat of Matteson and James (alpha = 1) from its definition (Otava docs/MATH.md)."""
    x, y = z[s:tau], z[tau:kappa]
    n, m = len(x), len(y)
    between = sum(abs(a - b) for a in x for b in y) * 2 / (n * m)
    wx = sum(abs(a - b) for a, b in itertools.combinations(x, 2)) / (n * (n - 1) / 2) if n > 1 else 0.0
    wy = sum(abs(a - b) for a, b in itertools.combinations(y, 2)) / (m * (m - 1) / 2) if m > 1 else 0.0
    return n * m / (n + m) * (between - wx - wy)


@pytest.mark.parametrize("seed", range(6))
def test_qhat_is_the_papers_divergence_at_every_split(seed):
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 1, int(rng.integers(3, 18)))
    start = int(rng.integers(0, len(z) - 2))
    q = cp.qhat(z, start, len(z))
    for tau in range(start + 1, len(z)):
        for kappa in range(start + 2, len(z) + 1):
            want = q_naive(z, start, tau, kappa) if kappa > tau else 0.0
            assert q[tau - start - 1, kappa - start - 2] == pytest.approx(want, abs=1e-9)


def test_the_best_split_is_ruptures_binary_segmentation_with_the_energy_cost():
    """For kappa = the end, maximizing Q-hat over tau is minimizing S(X)/(n-1) + S(Y)/(m-1), S the
    sum of pairwise distances in a piece: a cost ruptures' Binseg minimizes on its own."""
    rpt = pytest.importorskip("ruptures")
    from ruptures.base import BaseCost

    class Energy(BaseCost):
        model, min_size = "energy", 1

        def fit(self, signal):
            self.signal = np.asarray(signal, float).reshape(-1, 1)
            return self

        def error(self, start, end):
            seg = self.signal[start:end, 0]
            return float(np.abs(seg[:, None] - seg[None, :]).sum() / 2 / (len(seg) - 1)) if len(seg) > 1 else 0.0

    rng = np.random.default_rng(11)
    for _ in range(60):
        n = int(rng.integers(4, 40))
        z = rng.normal(0, 1, n)
        z[int(rng.integers(1, n)):] += rng.normal(0, 2)
        tau = rpt.Binseg(custom_cost=Energy(), min_size=1, jump=1).fit(z).predict(n_bkps=1)[0]
        last = cp.qhat(z, 0, n)[:, -1]
        assert last[tau - 1] == pytest.approx(last.max(), abs=1e-9)


def test_ttest_is_students_pooled_test():
    from scipy import stats

    rng = np.random.default_rng(2)
    a, b = rng.normal(1, 0.02, 11), rng.normal(0.97, 0.02, 9)
    assert cp.ttest(a, b)[0] == pytest.approx(stats.ttest_ind(a, b).pvalue, rel=1e-9)
    assert cp.ttest([1.0, 1.0], [1.0, 1.0])[0] != cp.ttest([1.0, 1.0], [1.0, 1.0])[0]  # nan: no evidence
    assert cp.ttest([1.0, 1.0], [2.0, 2.0])[0] == 0.0


def test_a_step_is_found_where_it_is_and_noise_or_a_short_series_calls_nothing():
    rng = np.random.default_rng(7)
    z = np.r_[rng.normal(1.0, 0.01, 11), rng.normal(0.97, 0.01, 9)]
    (s,) = cp.detect(z)
    assert s.index == 11 and s.pvalue < 1e-6 and s.forward_change_pct == pytest.approx(-3, abs=1.0)
    assert (s.n_before, s.n_after) == (11, 9)
    assert cp.detect(rng.normal(1.0, 0.01, 20)) == []
    assert cp.detect(z[:9]) == []  # under min_points
    assert cp.detect([1.0] * 30) == []


def test_two_steps_need_windows_short_enough_to_hold_one_each():
    """A dip of 15 points and a rise past the start: over one window of all 45 points the first
    split (15) is judged against the mixture after it and fails, which ends E-Divisive's search
    there; Otava 0.8 answers the same ([30] at window 50, [15, 30] at 20; checked by hand)."""
    rng = np.random.default_rng(3)
    z = np.r_[rng.normal(1.0, 0.005, 15), rng.normal(0.97, 0.005, 15), rng.normal(1.01, 0.005, 15)]
    assert [s.index for s in cp.detect(z, window=50)] == [30]
    assert [s.index for s in cp.detect(z, window=20)] == [15, 30]
    assert [s.index for s in cp.detect(z)] == [15, 30]  # the default window (30)
