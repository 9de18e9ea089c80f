"""A straight line through (x, y) points by ordinary least squares, with Student t intervals on
its slope and intercept and a band for the line itself (the mean response at x).

Used by the prefill curve (parity.workloads.prefill_curve): time to first token, or the
engine's own prompt time, against prompt tokens; the slope is milliseconds per prompt token
(1000 / slope = prefill tok/s), the intercept the fixed overhead in ms.  The interval is the
textbook one (residuals independent, equal variance): se(slope) = s / sqrt(Sxx),
se(intercept) = s * sqrt(1/n + mean(x)^2 / Sxx), s^2 = SSE / (n - 2), t on n - 2 degrees of
freedom; scipy.stats.linregress gives the same (tests/unit/test_linfit.py checks it)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

from parity.stats import usable
from parity.stats.paired import t_quantile

METHOD = "ordinary least squares; Student t intervals (n - 2 degrees of freedom) on slope and intercept"


@dataclass
class Fit:
    points: int  # points fitted
    slope: float | None = None
    intercept: float | None = None
    slope_low: float | None = None
    slope_high: float | None = None
    intercept_low: float | None = None
    intercept_high: float | None = None
    slope_se: float | None = None
    intercept_se: float | None = None
    r2: float | None = None
    s: float | None = None  # residual standard deviation
    x_mean: float | None = None
    sxx: float | None = None
    confidence: float = 0.95
    reason: str = ""  # why there is no line, or no interval

    def at(self, x: float) -> float | None:
        return None if self.slope is None else self.intercept + self.slope * x

    def band(self, x: float) -> tuple[float, float] | None:
        """The interval of the line's value at x (the mean response), None without an interval."""
        if self.s is None or self.points < 3:
            return None
        spread = math.sqrt(1 / self.points + (x - self.x_mean) ** 2 / self.sxx)
        hw = t_quantile(self.confidence, self.points - 2) * self.s * spread
        y = self.at(x)
        return y - hw, y + hw

    def to_dict(self, digits: int = 9) -> dict:
        """Its fields, floats to `digits` significant digits (a slope in ms per token is ~1e-3)."""
        return {k: float(f"{v:.{digits}g}") if isinstance(v, float) else v for k, v in asdict(self).items()}


def line(xs: Sequence[float], ys: Sequence[float], confidence: float = 0.95) -> Fit:
    """The least-squares line through the points whose x and y the statistics hold (parity.stats.usable)."""
    pts = [(float(x), float(y)) for x, y in zip(xs, ys) if usable(x) and usable(y)]
    n = len(pts)
    f = Fit(points=n, confidence=confidence)
    if len({x for x, _ in pts}) < 2:
        f.reason = f"{n} point(s) at {len({x for x, _ in pts})} distinct x: a line needs two"
        return f
    xm = sum(x for x, _ in pts) / n
    ym = sum(y for _, y in pts) / n
    sxx = sum((x - xm) ** 2 for x, _ in pts)
    sxy = sum((x - xm) * (y - ym) for x, y in pts)
    syy = sum((y - ym) ** 2 for _, y in pts)
    f.slope = sxy / sxx
    f.intercept = ym - f.slope * xm
    f.x_mean, f.sxx = xm, sxx
    sse = max(0.0, sum((y - f.intercept - f.slope * x) ** 2 for x, y in pts))
    f.r2 = 1 - sse / syy if syy > 0 else None
    if n < 3:
        f.reason = "2 points: a line, no interval (need >= 3)"
        return f
    f.s = math.sqrt(sse / (n - 2))
    t = t_quantile(confidence, n - 2)
    f.slope_se = f.s / math.sqrt(sxx)
    f.intercept_se = f.s * math.sqrt(1 / n + xm**2 / sxx)
    f.slope_low, f.slope_high = f.slope - t * f.slope_se, f.slope + t * f.slope_se
    f.intercept_low, f.intercept_high = f.intercept - t * f.intercept_se, f.intercept + t * f.intercept_se
    return f


def rate(f: Fit, per: float = 1000.0) -> dict:
    """per / slope with its interval (the slope's, inverted): prefill tok/s from ms per token.
    A slope whose interval reaches 0 or below bounds no rate from above: high is None."""
    if f.slope is None or f.slope <= 0:
        why = "no line" if f.slope is None else f"slope {f.slope:.4g} <= 0: no rate"
        return {"rate": None, "low": None, "high": None, "why": why}
    out = {"rate": per / f.slope, "low": None, "high": None}
    if f.slope_high is not None:
        out["low"] = per / f.slope_high
        out["high"] = per / f.slope_low if f.slope_low > 0 else None
    return out


def difference(a: dict, b: dict, confidence: float = 0.95) -> dict:
    """b - a over the blocks both have, its mean and Student t interval: for a paired quantity a ratio
    cannot hold (an intercept, which may be 0 or negative)."""
    blocks = sorted(k for k in set(a) & set(b) if usable(a[k]) and usable(b[k]))
    d = [b[k] - a[k] for k in blocks]
    out = {"blocks": blocks, "n_blocks": len(d), "diff": None, "low": None, "high": None, "reason": ""}
    if not d:
        out["reason"] = "no block has both arms"
        return out
    n, mean = len(d), sum(d) / len(d)
    out["diff"] = mean
    if n < 2:
        out["reason"] = "one block: no interval (need >= 2 blocks)"
        return out
    hw = t_quantile(confidence, n - 1) * math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1)) / math.sqrt(n)
    out["low"], out["high"] = mean - hw, mean + hw
    return out
