"""Repeats, medians, CV and the A/B promotion rule (stdlib and msgspec only: fast to import; the
records are msgspec Structs: a dataclass's class costs ~0.4 ms of every start to create).

The rule (Phase 139/141 of the seeds): a B-vs-A change counts only when
|delta of medians| > max(min_delta_pct, noise_k x same-binary stdev as % of the
control median) AND, when required, every repeat moved in the same direction.
Otherwise it is within noise, however good one run looked.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Iterable, Sequence

import msgspec

IMPROVED, REGRESSED, NOISE = "improved", "regressed", "within noise"
VERDICTS = (IMPROVED, REGRESSED, NOISE)
MISSING = "missing"  # the rule could not judge (a value or its noise estimate is missing): never within noise


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return math.nan
    v = sorted(values)
    k = (len(v) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


RANGE = (1e-100, 1e100)  # magnitudes the statistics hold: they square values, take ratios and exponentiate log ratios


def usable(v) -> bool:
    """A number the statistics can hold: finite, and 0 or within RANGE in magnitude (1e308 overflows them)."""
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
        return False
    return v == 0 or RANGE[0] <= abs(v) <= RANGE[1]


def finite(values: Iterable) -> list[float]:
    return [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]


class Summary(msgspec.Struct):
    n: int
    median: float | None
    mean: float | None
    stdev: float | None  # sample stdev; None with fewer than 2 values
    cv_pct: float | None  # stdev / mean x 100
    min: float | None
    max: float | None


def describe(values: Iterable) -> Summary:
    v = finite(values)
    if not v:
        return Summary(0, None, None, None, None, None, None)
    import statistics  # on first use: with fractions, ~4 ms a start that computes none

    mean = statistics.fmean(v)
    sd = statistics.stdev(v) if len(v) > 1 else None
    cv = sd / abs(mean) * 100 if sd is not None and mean else None
    return Summary(len(v), statistics.median(v), mean, sd, cv, min(v), max(v))


def stdev_pct(values: Iterable) -> float | None:
    """Sample stdev as % of the median (the seeds' same-binary noise figure)."""
    s = describe(values)
    if s.stdev is None or not s.median:
        return None
    return s.stdev / abs(s.median) * 100


# ----------------------------------------------------------------- rank-based CI


@lru_cache(maxsize=256)
def _u_counts(n: int, m: int) -> tuple[int, ...]:
    """Number of orderings giving each Mann-Whitney U (0..n*m) under H0."""
    # f(n, m) = f(n-1, m) shifted by m  +  f(n, m-1)
    if n == 0 or m == 0:
        return (1,)
    a, b = _u_counts(n - 1, m), _u_counts(n, m - 1)
    out = [0] * (n * m + 1)
    for u, c in enumerate(a):
        out[u + m] += c
    for u, c in enumerate(b):
        out[u] += c
    return tuple(out)


def shift_ci(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float] | None:
    """Hodges-Lehmann shift (median of all b_j - a_i) with its distribution-free
    (Mann-Whitney) confidence interval: (estimate, low, high).  None when the
    samples are too small for that confidence (e.g. 2 vs 2 at 95%)."""
    a, b = finite(a), finite(b)
    n, m = len(a), len(b)
    if not n or not m or n * m > 2500:
        return None
    diffs = sorted(y - x for x in a for y in b)
    import statistics

    est = statistics.median(diffs)
    counts = _u_counts(n, m)
    total = sum(counts)
    alpha_half = (1 - confidence) / 2
    cum, w = 0, 0
    for u, c in enumerate(counts):  # largest w with P(U <= w-1) <= alpha/2
        cum += c
        if cum / total <= alpha_half:
            w = u + 1
        else:
            break
    if w == 0:
        return None
    return est, diffs[w - 1], diffs[n * m - w]


# ----------------------------------------------------------------- the A/B rule


class Rule(msgspec.Struct):
    min_delta_pct: float = 2.0
    noise_k: float = 3.0
    require_consistent_direction: bool = True
    confidence: float = 0.95

    @classmethod
    def from_config(cls, cfg) -> "Rule":
        return cls(cfg.min_delta_pct, cfg.noise_k, cfg.require_consistent_direction, getattr(cfg, "confidence", 0.95))

    def text(self) -> str:
        cons = " and every repeat moves the same way" if self.require_consistent_direction else ""
        return f"|delta of medians| > max({self.min_delta_pct:g}%, {self.noise_k:g} x same-binary stdev % of the control median){cons}"


class ABResult(msgspec.Struct):
    a_median: float | None
    b_median: float | None
    a_repeats: int
    b_repeats: int
    delta_pct: float | None  # (B - A) / A x 100, raw sign
    gain_pct: float | None  # delta_pct signed so that positive = better
    stdev_pct: float | None  # the noise estimate used (max of control and floor run)
    noise_source: str
    threshold_pct: float  # max(min_delta_pct, noise_k x stdev_pct)
    consistent: bool | None
    ci_pct: list[float] | None  # rank-based CI of the shift, % of the A median
    verdict: str
    reason: str
    better: str = "higher"
    extra: dict = msgspec.field(default_factory=dict)

    def to_dict(self) -> dict:
        return msgspec.structs.asdict(self)


def _paired_signs(a: dict, b: dict, a_med: float, paired: bool) -> list[float]:
    """Per-repeat deltas: paired by repeat index for a same-session ABAB,
    else every B repeat against the control median."""
    common = sorted(set(a) & set(b))
    if paired and len(common) >= 2:
        return [b[k] - a[k] for k in common]
    return [v - a_med for v in b.values()]


def compare_samples(a, b, rule: Rule, better: str = "higher", floor_values=None, paired: bool = False) -> ABResult:
    """Apply the promotion rule to repeats of one metric.  a/b: lists of values,
    or {repeat_index: value} dicts; paired=True when repeat i of A and B ran
    back to back in one session (ABAB).  floor_values: repeats of a same-binary
    noise-floor run, whose stdev counts too (the larger one wins)."""
    a_map = dict(a) if isinstance(a, dict) else dict(enumerate(a))
    b_map = dict(b) if isinstance(b, dict) else dict(enumerate(b))
    a_map = {k: float(v) for k, v in a_map.items() if finite([v])}
    b_map = {k: float(v) for k, v in b_map.items() if finite([v])}
    sign = -1.0 if better == "lower" else 1.0
    sa, sb = describe(a_map.values()), describe(b_map.values())
    noise = [(stdev_pct(a_map.values()), "control repeats")]
    if floor_values is not None:
        noise.append((stdev_pct(floor_values), "noise-floor run"))
    noise = [(v, src) for v, src in noise if v is not None]
    sd, src = max(noise) if noise else (None, "none")
    threshold = max(rule.min_delta_pct, rule.noise_k * sd) if sd is not None else rule.min_delta_pct

    def result(verdict, reason, delta=None, consistent=None, ci=None):
        return ABResult(sa.median, sb.median, sa.n, sb.n, delta, None if delta is None else delta * sign, sd, src, threshold, consistent, ci, verdict, reason, better)

    if not sa.n or not sb.n:
        return result(NOISE, f"no values ({'A' if not sa.n else 'B'} has none)")
    if not sa.median:
        return result(NOISE, "control median is 0")
    delta = (sb.median - sa.median) / abs(sa.median) * 100
    ci = None
    hl = shift_ci(list(a_map.values()), list(b_map.values()), rule.confidence)
    if hl is not None:
        ci = [hl[1] / abs(sa.median) * 100, hl[2] / abs(sa.median) * 100]
    signs = _paired_signs(a_map, b_map, sa.median, paired)
    consistent = all(d * delta > 0 for d in signs) if delta else False
    if sd is None:
        return result(NOISE, "no same-binary noise estimate (need >= 2 control repeats or a noise-floor run)", delta, consistent, ci)
    if abs(delta) <= threshold:
        return result(NOISE, f"|{delta:+.2f}%| <= {threshold:.2f}% threshold", delta, consistent, ci)
    if rule.require_consistent_direction and not consistent:
        return result(NOISE, f"{delta:+.2f}% beats {threshold:.2f}% but repeats disagree on the direction", delta, consistent, ci)
    verdict = IMPROVED if delta * sign > 0 else REGRESSED
    return result(verdict, f"{delta:+.2f}% beyond the {threshold:.2f}% threshold ({'lower' if better == 'lower' else 'higher'} is better)", delta, consistent, ci)


def unjudged(r: ABResult, where: str) -> ABResult:
    """A result the rule could not judge is missing, never within noise: no values, a control
    median of 0 (no ratio), or no same-binary noise estimate (one control repeat and no noise floor),
    which the rule's threshold needs.  where: what the cell is ("ttft_p50_ms stock at N=8")."""
    if r.verdict != NOISE or (r.stdev_pct is not None and r.delta_pct is not None):
        return r
    if r.delta_pct is None:  # no values, or a control median of 0: the rule said why
        return msgspec.structs.replace(r, verdict=MISSING, reason=f"{where}: {r.reason}")
    why = (f"no same-binary noise estimate for {where} (A has {r.a_repeats} repeat(s): need >= 2, or --noise-floor)"
           f"; the change {r.delta_pct:+.2f}% cannot be judged")
    return msgspec.structs.replace(r, verdict=MISSING, reason=why)


def overall(verdicts: Iterable[str]) -> str:
    """One word for a set of metric verdicts: any regression wins."""
    vs = list(verdicts)
    if REGRESSED in vs:
        return REGRESSED
    if IMPROVED in vs:
        return IMPROVED
    return NOISE
