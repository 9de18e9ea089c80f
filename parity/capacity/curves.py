"""Margin curves: per engine and objective, the margin against log(load) as lines with one slope
for every block and an intercept per block (its block effect: the drift of the box while the
block ran moves the curve up or down); where a block's line crosses 0 is that block's capacity
for the objective; and summaries over blocks.

Why one slope: within a block the probes of one level run back to back and share the box's
drift, but the levels do not share it with each other, so a block's own slope is mostly drift
(3 % of drift per level against a 4 % change of the curve between levels spaced 10 % apart, on
the simulator).  Over every block the level-to-level drift averages out of the slope, while the
block's intercept keeps the drift its engines shared, which cancels in their ratio."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from parity.stats import usable
from parity.stats.paired import t_quantile


@dataclass
class Crossing:
    load: float | None  # where the line crosses 0; math.inf: the objective holds at every level and does not fall
    why: str = ""  # no crossing: why
    outside: bool = False  # the crossing lies beyond the probed levels (extrapolated)
    far: bool = False  # ... and beyond `reach` of them: a guess to move the levels by, not a capacity


def pooled_slope(blocks: Sequence[tuple[Sequence[float], Sequence[float | None]]]) -> float | None:
    """The least-squares slope of margin on log(load) with an intercept per block: blocks is
    [(loads, margins)] (a block's levels and its margins at them).  None: no block has two
    levels with a margin."""
    sxy = sxx = 0.0
    for loads, margins in blocks:
        pts = [(math.log(x), m) for x, m in zip(loads, margins) if m is not None and usable(m) and x > 0]
        if len(pts) < 2:
            continue
        xm = sum(p[0] for p in pts) / len(pts)
        ym = sum(p[1] for p in pts) / len(pts)
        sxy += sum((x - xm) * (y - ym) for x, y in pts)
        sxx += sum((x - xm) ** 2 for x, _ in pts)
    return sxy / sxx if sxx > 0 else None


def crossing(loads: Sequence[float], margins: Sequence[float | None], slope: float | None,
             reach: float = 1.25) -> Crossing:
    """Where the line of `slope` through the block's (log load, margin) points crosses 0;
    `reach`: how far past the outer levels (a factor) an extrapolated crossing still counts."""
    pts = [(math.log(x), m) for x, m in zip(loads, margins) if m is not None and usable(m) and x > 0]
    if not pts:
        return Crossing(None, "no level with a margin")
    if slope is None:
        return Crossing(None, "no slope: no block has two levels with a margin")
    lo, hi = min(loads), max(loads)
    if slope >= 0:
        if all(p[1] >= 0 for p in pts):
            return Crossing(math.inf, "holds at every level and does not fall with the load")
        return Crossing(None, "fails at a level, and the margin does not fall with the load (slope >= 0)")
    xm = sum(p[0] for p in pts) / len(pts)
    x = xm - sum(p[1] for p in pts) / len(pts) / slope
    if x > 700:  # past exp's range: the margin falls too slowly to cross at any reachable load
        return Crossing(math.inf, "the margin falls too slowly to cross 0 at any load")
    load = math.exp(x)
    if load > hi * reach and all(p[1] >= 0 for p in pts):
        return Crossing(math.inf, f"holds at every level; the line crosses only at {load:.4g}, past the levels")
    if load < lo / reach or load > hi * reach:
        why = f"crosses at {load:.4g}, beyond {reach:g}x the levels {lo:g}..{hi:g}"
        return Crossing(load, why, outside=True, far=True)
    return Crossing(load, outside=not lo <= load <= hi)


def pct_per_pct(slope: float | None) -> float | None:
    """How far (%) the crossing of a line of `slope` (margin per unit of log load) moves when the
    objective's percentile moves 1 %: the margin is log(limit / percentile), so 1 % shifts the line
    by log(1.01) and the crossing by that over |slope|.  None: the margin does not fall with load."""
    if slope is None or not usable(slope) or slope >= 0:
        return None
    return (math.exp(math.log(1.01) / -slope) - 1) * 100


def geo_interval(values: Sequence[float], confidence: float = 0.95) -> dict:
    """The geometric mean of positive values and a Student t interval on their logs (None
    bounds with fewer than 2)."""
    logs = [math.log(v) for v in values if usable(v) and v > 0]
    n = len(logs)
    if not n:
        return {"n": 0, "value": None, "low": None, "high": None, "half_width_pct": None}
    mean = sum(logs) / n
    if n < 2:
        return {"n": 1, "value": math.exp(mean), "low": None, "high": None, "half_width_pct": None}
    sd = math.sqrt(sum((v - mean) ** 2 for v in logs) / (n - 1))
    hw = t_quantile(confidence, n - 1) * sd / math.sqrt(n)
    return {"n": n, "value": math.exp(mean), "low": math.exp(mean - hw), "high": math.exp(mean + hw),
            "half_width_pct": (math.exp(hw) - 1) * 100}


def mean_interval(values: Sequence[float], confidence: float = 0.95) -> dict:
    """The mean and a Student t interval (a margin can be negative: no logs)."""
    v = [x for x in values if usable(x)]
    n = len(v)
    if not n:
        return {"n": 0, "value": None, "low": None, "high": None}
    mean = sum(v) / n
    if n < 2:
        return {"n": 1, "value": mean, "low": None, "high": None}
    sd = math.sqrt(sum((x - mean) ** 2 for x in v) / (n - 1))
    hw = t_quantile(confidence, n - 1) * sd / math.sqrt(n)
    return {"n": n, "value": mean, "low": mean - hw, "high": mean + hw}
