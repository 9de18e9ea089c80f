"""Open-loop arrival times: gamma inter-arrival gaps with mean 1/rate and coefficient of
variation 1/sqrt(burstiness) (burstiness 1: Poisson), seeded and reproducible; and what
the load generator achieved against them."""

from __future__ import annotations

import math
import statistics

import pytest

from parity.loadgen.arrivals import achieved, open_loop_times
from parity.metrics.serving import RequestRecord

DRAWS = 20_000
# over 20 seeds x 20,000 gaps the worst relative error seen was 2.9 % (mean, burstiness
# 0.25) and 2.8 % (CV, burstiness 0.5): 6 % is twice that, and far from a wrong shape
TOL = 0.06


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip(times, times[1:])]


@pytest.mark.parametrize("burstiness", [0.25, 0.5, 1.0, 2.0, 4.0])
@pytest.mark.parametrize("seed", [0, 1, 7])
def test_gaps_have_mean_one_over_rate_and_cv_one_over_sqrt_burstiness(burstiness, seed):
    rate = 5.0
    g = gaps(open_loop_times(DRAWS + 1, rate, burstiness, seed))
    mean = statistics.fmean(g)
    cv = statistics.pstdev(g) / mean
    assert mean == pytest.approx(1 / rate, rel=TOL)
    assert cv == pytest.approx(1 / math.sqrt(burstiness), rel=TOL)


def test_poisson_gaps_are_exponential_not_just_any_shape_with_cv_one():
    # P(gap > mean) = e^-1 for an exponential; a uniform on [0, 2/rate] (CV 0.58) or a
    # two-point mix with CV 1 would give 0.5
    rate = 50.0
    g = gaps(open_loop_times(DRAWS + 1, rate, 1.0, seed=3))
    share = sum(x > 1 / rate for x in g) / len(g)
    assert share == pytest.approx(math.exp(-1), abs=0.015)  # sd of the share: sqrt(.37*.63/20000) = 0.0034


def test_larger_burstiness_is_more_regular():
    cvs = []
    for b in (0.5, 1.0, 8.0):
        g = gaps(open_loop_times(5001, 10.0, b, seed=2))
        cvs.append(statistics.pstdev(g) / statistics.fmean(g))
    assert cvs[0] > cvs[1] > cvs[2]


def test_seeded_and_reproducible():
    a = open_loop_times(500, 4.0, 1.0, seed=11)
    assert a == open_loop_times(500, 4.0, 1.0, seed=11)
    assert a != open_loop_times(500, 4.0, 1.0, seed=12)
    assert a[0] == 0.0 and all(x <= y for x, y in zip(a, a[1:]))
    # the rate scales the same draws: the schedule's shape does not depend on the rate
    b = open_loop_times(500, 8.0, 1.0, seed=11)
    assert b == pytest.approx([x / 2 for x in a], rel=1e-9)


def test_exact_schedules_keep_the_shape_and_hit_the_requested_rate():
    raw = open_loop_times(21, 2.0, 1.0, seed=5)
    exact = open_loop_times(21, 2.0, 1.0, seed=5, exact=True)
    assert exact[-1] == pytest.approx(20 / 2.0, rel=1e-12)  # (n - 1) / rate: the schedule's mean rate is 2 req/s
    assert (len(raw) - 1) / raw[-1] != pytest.approx(2.0, rel=0.01)  # this raw draw of 20 gaps misses it
    scale = exact[-1] / raw[-1]
    assert exact == pytest.approx([t * scale for t in raw], rel=1e-9)  # same draws, one scale
    g = gaps(open_loop_times(DRAWS + 1, 5.0, 0.5, seed=1, exact=True))
    assert statistics.pstdev(g) / statistics.fmean(g) == pytest.approx(math.sqrt(2), rel=TOL)
    assert open_loop_times(1, 3.0, exact=True) == [0.0] and open_loop_times(0, 3.0) == []


@pytest.mark.parametrize("rate,burstiness", [(0, 1), (-1, 1), (1, 0), (1, -2)])
def test_bad_parameters_are_refused(rate, burstiness):
    with pytest.raises(ValueError, match="positive"):
        open_loop_times(10, rate, burstiness)


def test_achieved_rate_and_scheduling_delay_by_hand():
    due = [0.0, 0.5, 1.0, 1.5, 2.0]
    late = [0.0, 0.001, 0.0005, 0.002, 0.0]
    recs = [RequestRecord(send=10 + d + x, scheduled=10 + d) for d, x in zip(due, late)]
    a = achieved(recs)
    assert a["sent"] == 5
    assert a["achieved_rate"] == pytest.approx(4 / 2.0, rel=1e-3)
    assert a["delay_max_ms"] == pytest.approx(2.0, abs=1e-3)
    assert a["delay_p50_ms"] == pytest.approx(0.5, abs=1e-3)
