"""The Harrell-Davis quantile: a Beta-weighted mean of every order statistic (Harrell & Davis 1982).

It estimates the same population quantile as the sample one, but moves less when the values step
near it: a replay's TTFTs have gaps of 5-15 ms within a few ranks of the middle, and the sample median
of 147 of them moves by the gap when one request changes side.  On four
recorded A/A replays on H200s the per-block spread of the arms' median ratio fell to 0.67-0.90x
the sample median's (docs/WORKLOADS.md); on TPOT, which has no such step, it does not help."""

from __future__ import annotations

import math
from typing import Sequence


def harrell_davis(values: Sequence[float], q: float) -> float:
    """The Harrell-Davis estimate of quantile q (0..1) of values; nan when there are none."""
    if not 0 < q < 1:
        raise ValueError(f"quantile {q} is not inside (0, 1)")
    v = sorted(values)
    n = len(v)
    if n == 0:
        return math.nan
    if n == 1:
        return float(v[0])
    from scipy.special import betainc  # lazy: a run imports it, `parity --help` does not

    a, b = (n + 1) * q, (n + 1) * (1 - q)
    cdf = betainc(a, b, [i / n for i in range(n + 1)])
    return float(sum((cdf[i + 1] - cdf[i]) * x for i, x in enumerate(v)))
