"""parity.stats.linfit: the least-squares line with its intervals, against scipy.stats.linregress
(an independent implementation) on the points of a real prefill-curve run, and the edges: too
few points, a slope whose interval reaches zero, the band of the line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from scipy import stats as sps

from parity.stats import linfit

DATA = Path(__file__).resolve().parents[1] / "data" / "workloads" / "smoke-prefill-curve-summary.json"


def recorded_points() -> dict[tuple, list[tuple[float, float]]]:
    """(engine, N, curve) -> (prompt tokens, ms) of every valid row of the recorded run."""
    out: dict[tuple, list] = {}
    for r in json.loads(DATA.read_text())["rows"]:
        if r["valid"]:
            out.setdefault((r["engine"], r["concurrency"], "ttft"), []).append((r["prompt_len"], r["ttft_mean_ms"]))
            out.setdefault((r["engine"], r["concurrency"], "prompt"), []).append((r["engine_prompt_n_mean"], r["engine_prompt_ms_mean"]))
    return out


def test_the_line_and_its_intervals_are_scipys_on_recorded_points():
    pts = recorded_points()
    assert len(pts) >= 4
    for key, xy in pts.items():
        xs, ys = [x for x, _ in xy], [y for _, y in xy]
        f = linfit.line(xs, ys)
        ref = sps.linregress(xs, ys)
        t = sps.t.ppf(0.975, len(xs) - 2)
        assert f.points == len(xs) >= 6, key
        assert f.slope == pytest.approx(ref.slope, rel=1e-9) and f.intercept == pytest.approx(ref.intercept, rel=1e-9, abs=1e-9)
        assert f.slope_se == pytest.approx(ref.stderr, rel=1e-9) and f.intercept_se == pytest.approx(ref.intercept_stderr, rel=1e-9)
        assert f.r2 == pytest.approx(ref.rvalue**2, rel=1e-9)
        assert (f.slope_low, f.slope_high) == pytest.approx((ref.slope - t * ref.stderr, ref.slope + t * ref.stderr), rel=1e-9)
        assert (f.intercept_low, f.intercept_high) == pytest.approx((ref.intercept - t * ref.intercept_stderr, ref.intercept + t * ref.intercept_stderr), rel=1e-9, abs=1e-9)
        # the band at the mean of x is the intercept-free t * s / sqrt(n); it widens away from it
        lo, hi = f.band(f.x_mean)
        assert (hi - lo) / 2 == pytest.approx(t * f.s / math.sqrt(f.points), rel=1e-9)
        lo2, hi2 = f.band(max(xs))
        assert hi2 - lo2 > hi - lo
        r = linfit.rate(f)
        assert r["rate"] == pytest.approx(1000 / ref.slope) and r["low"] == pytest.approx(1000 / f.slope_high)


def test_too_few_points_give_a_reason_not_a_number():
    one = linfit.line([128, 128, 128], [5.0, 6.0, 7.0])
    assert one.slope is None and "a line needs two" in one.reason and linfit.rate(one)["rate"] is None
    two = linfit.line([128, 256], [5.0, 9.0])
    assert two.slope == pytest.approx(4 / 128) and two.slope_low is None and two.band(200) is None and "no interval" in two.reason
    nan = linfit.line([128, 256, 512, float("nan")], [5.0, 9.0, 17.0, 1.0])
    assert nan.points == 3  # a number the statistics cannot hold is left out, not fitted


def test_a_slope_whose_interval_reaches_zero_bounds_no_rate_from_above():
    f = linfit.line([100, 200, 300, 400], [1.0, 10.0, 4.0, 12.0])  # a small positive slope, a wide interval
    assert f.slope > 0 and f.slope_low < 0 < f.slope_high
    r = linfit.rate(f)
    assert r["rate"] == pytest.approx(1000 / f.slope) and r["low"] == pytest.approx(1000 / f.slope_high) and r["high"] is None
    down = linfit.line([100, 200, 300], [3.0, 2.0, 1.0])
    assert linfit.rate(down) == {"rate": None, "low": None, "high": None, "why": "slope -0.01 <= 0: no rate"}
