"""Change points in one series, by the method Apache Otava runs on nightly performance data
(Hunter, Fleming et al. 2023; Otava's docs/MATH.md), written here from its description:

1. split: windows of `window` points slide by half a window; in each, E-Divisive (Matteson and
   James 2014) proposes the split tau (and the end kappa of the right piece) that maximizes the
   energy divergence Q-hat between Z[s:tau] and Z[tau:kappa]; a Student t test between the two
   pieces the split makes (the interval's, between the change points found so far) keeps it
   while p <= 10 x max_pvalue (a "weak" change point), and the window is split again;
2. merge: the weakest point (largest p, or with every p under max_pvalue the smallest relative
   change when min_magnitude asks) is dropped and its neighbours re-tested between their new
   neighbours, until every remaining point has p <= max_pvalue.

numpy and scipy.special only (scipy.stats costs ~0.5 CPU-s to import)."""

from __future__ import annotations

import math
from dataclasses import dataclass

MIN_POINTS = 10  # a series (and a window) shorter than this calls no change
WINDOW = 30  # Hunter's; Otava 0.8 defaults to 50, which can hide a step that a later one reverses (the tests)
MAX_PVALUE = 0.001


@dataclass
class Split:
    index: int  # the first point after the change
    qhat: float
    pvalue: float
    mean_before: float
    mean_after: float
    std_before: float
    std_after: float
    n_before: int
    n_after: int

    @property
    def forward_change_pct(self) -> float:
        return (self.mean_after / self.mean_before - 1.0) * 100 if self.mean_before else 0.0

    @property
    def magnitude(self) -> float:
        """Otava's change magnitude: the larger relative change, forward or backward."""
        fwd = self.mean_after / self.mean_before - 1.0 if self.mean_before else 0.0
        back = self.mean_before / self.mean_after - 1.0 if self.mean_after else 0.0
        return max(abs(fwd), abs(back))


def pair_sums(z):
    """P with P[a, b] = sum of |z_i - z_j| over a <= i < j < b (2D prefix sums of the upper triangle)."""
    import numpy as np

    d = np.abs(z[:, None] - z[None, :])
    up = np.triu(d, k=1)
    c = np.zeros((len(z) + 1, len(z) + 1))
    c[1:, 1:] = up.cumsum(0).cumsum(1)  # c[i, j] = sum of up[:i, :j]
    return c


def qhat(z, start: int, end: int):
    """Q[t, k] for tau = start + 1 + t and kappa = start + 2 + k over z[start:end]; as in Otava, a
    cell with kappa <= tau holds 0 (so a window whose every split diverges negatively proposes one
    anyway, which the t test then judges)."""
    import numpy as np

    c = pair_sums(z)

    def rect(r0, r1, c0, c1):  # sum of up[r0:r1, c0:c1]
        return c[r1, c1] - c[r0, c1] - c[r1, c0] + c[r0, c0]

    taus = np.arange(start + 1, end)[:, None]
    kappas = np.arange(start + 2, end + 1)[None, :]
    valid = kappas > taus
    n = (taus - start).astype(float)
    m = (kappas - taus).astype(float)
    total = n + m
    between = rect(start, taus, taus, kappas)  # pairs i in [start, tau), j in [tau, kappa): i < j always
    within_x = rect(start, taus, start, taus)
    within_y = rect(taus, kappas, taus, kappas)
    with np.errstate(divide="ignore", invalid="ignore"):
        wx = np.where(n >= 2, within_x / (n * (n - 1) / 2), 0.0)
        wy = np.where(m >= 2, within_y / (m * (m - 1) / 2), 0.0)
        q = n * m / total * (2 * between / (n * m) - wx - wy)
    return np.where(valid, q, 0.0)


def candidate(z, start: int, end: int) -> tuple[int, float]:
    """(tau, Q-hat) of the best split of z[start:end] (tau is the first point of the right piece)."""
    import numpy as np

    q = qhat(z, start, end)
    i, j = np.unravel_index(int(np.argmax(q)), q.shape)
    return start + 1 + int(i), float(q[i, j])


def ttest(left, right, ddof: int = 1) -> tuple[float, float, float, float, float]:
    """Two-sided Student t test with pooled variance: (p, mean_l, mean_r, sd_l, sd_r).  ddof=0
    reproduces Otava's numbers (it hands numpy's population std to scipy as the sample std)."""
    import numpy as np
    from scipy.special import stdtr

    left, right = np.asarray(left, float), np.asarray(right, float)
    ml, mr = float(left.mean()), float(right.mean())
    sl = float(left.std(ddof=ddof)) if len(left) >= 2 else 0.0
    sr = float(right.std(ddof=ddof)) if len(right) >= 2 else 0.0
    nl, nr = len(left), len(right)
    if nl + nr <= 2:
        return 1.0, ml, mr, sl, sr
    df = nl + nr - 2
    pooled = ((nl - 1) * sl**2 + (nr - 1) * sr**2) / df
    se = math.sqrt(pooled * (1 / nl + 1 / nr))
    if se == 0:
        return (float("nan") if ml == mr else 0.0), ml, mr, sl, sr
    t = (ml - mr) / se
    return float(2 * stdtr(df, -abs(t))), ml, mr, sl, sr


def intervals(points: list[int], start: int, end: int) -> list[tuple[int, int]]:
    edges = [start, *sorted(points), end]
    return [(a, b) for a, b in zip(edges, edges[1:]) if a != b]


def judge(z, index: int, qh: float, cuts: list[int], start: int, end: int, ddof: int) -> Split:
    """The t test of a split at index between the neighbouring cuts (or the interval it splits)."""
    lo = max([c for c in cuts if c < index], default=start)
    hi = min([c for c in cuts if c > index], default=end)
    p, ml, mr, sl, sr = ttest(z[lo:index], z[index:hi], ddof)
    return Split(index, qh, p, ml, mr, sl, sr, index - lo, hi - index)


def divisive(z, start: int, end: int, max_pvalue: float, ddof: int = 1) -> list[Split]:
    """E-Divisive within z[start:end]: the best candidate over the current intervals, kept while
    significant; the first insignificant one ends the search (as Otava's detector does)."""
    found: list[Split] = []
    while True:
        cands = [(*candidate(z, a, b), a, b) for a, b in intervals([s.index for s in found], start, end) if b - a > 1]
        if not cands:
            return found
        tau, qh, a, b = max(cands, key=lambda c: c[1])
        s = judge(z, tau, qh, [x.index for x in found], a, b, ddof)
        if not (s.pvalue <= max_pvalue):  # nan: no evidence either way
            return found
        found.append(s)
        found.sort(key=lambda x: x.index)


def split(z, window: int, max_pvalue: float, ddof: int = 1) -> list[Split]:
    """The weak change points of every sliding window, re-tested between their neighbours."""
    import numpy as np

    step = max(1, window // 2)
    weak: dict[int, float] = {}
    start = 0
    while start < len(z):
        end = min(start + window, len(z))
        new = divisive(np.asarray(z[start:end], float), 0, end - start, max_pvalue, ddof)
        for s in new:
            weak.setdefault(start + s.index, s.qhat)
        start = max(start + new[-1].index if new else 0, start + step)
    cuts = sorted(weak)
    return [judge(z, i, weak[i], cuts, 0, len(z), ddof) for i in cuts]


def neighbours(k: int, how: str) -> tuple[int, int]:
    """After the point at k is dropped: the points whose intervals changed, k - 1 and k (the one
    now at k).  Otava (0.8, and Hunter before it) re-tests k and k + 1 instead, leaving the left
    neighbour's p-value stale: how="otava" reproduces that, for the comparison with its output."""
    return (k, k + 1) if how == "otava" else (k - 1, k)


def merge(points: list[Split], z, max_pvalue: float, min_magnitude: float, ddof: int = 1, how: str = "adjacent") -> list[Split]:
    points = sorted(points, key=lambda s: s.index)
    while points:
        weakest = max(points, key=lambda s: s.pvalue if not math.isnan(s.pvalue) else math.inf)
        if weakest.pvalue < max_pvalue:
            weakest = min(points, key=lambda s: s.magnitude)
            if weakest.magnitude > min_magnitude:
                return points
        k = points.index(weakest)
        del points[k]
        cuts = [s.index for s in points]
        for j in neighbours(k, how):  # their intervals reach further now
            if 0 <= j < len(points):
                points[j] = judge(z, points[j].index, points[j].qhat, cuts, 0, len(z), ddof)
    return points


def detect(values, window: int = WINDOW, max_pvalue: float = MAX_PVALUE, min_magnitude: float = 0.0, min_points: int = MIN_POINTS, ddof: int = 1, how: str = "adjacent") -> list[Split]:
    """The change points of a series (time order).  Fewer than min_points values: none (the
    window is widened to min_points when the series allows).  ddof=0, how="otava": Otava's own
    numbers (see ttest, neighbours)."""
    import numpy as np

    z = np.asarray([float(v) for v in values], float)
    if len(z) < min_points or not np.all(np.isfinite(z)):
        return []
    window = max(window, min_points)
    weak_p = max_pvalue * 10 if max_pvalue < 0.05 else (max_pvalue * 2 if max_pvalue < 0.5 else max_pvalue)
    return merge(split(z, window, weak_p, ddof), z, max_pvalue, min_magnitude, ddof, how)
