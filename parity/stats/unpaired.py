"""Unpaired comparison of two runs (different sessions): no blocks, so no pairing.

`parity compare` / `report --compare` put this beside the users' rule: the ratio of the
geometric means B/A with a Welch t interval on the log values (unequal variances,
Welch-Satterthwaite degrees of freedom), and the same three outcomes as the paired
statistics (parity.stats.paired) with the same practical threshold.  Box drift between the
two sessions is NOT cancelled here: it widens the interval (or, when it is systematic,
moves the estimate), which is why the label says unpaired.

`ratio_change` compares two runs that hold the same engines: each run's own paired block
ratios engine/reference (drift-cancelled within its session), compared across the runs
unpaired: how much the engine's ratio to its reference moved."""

from __future__ import annotations

import math

from parity.stats import usable
from parity.stats.paired import EQUIVALENT, IMPROVED, INCONCLUSIVE, REGRESSED, exp_or_none, t_quantile

METHOD = "unpaired (different sessions): ratio of geometric means B/A; 95 % Welch t interval on the log values"
CHANGE_METHOD = "each run's paired block ratios engine/reference; their change B/A across the runs: ratio of geometric means, 95 % Welch t interval on the log block ratios (unpaired)"


def _logs(values) -> list[float]:
    return [math.log(v) for v in values if usable(v) and v > 0]


def welch(a, b, better: str = "higher", threshold_pct: float = 2.0, confidence: float = 0.95, method: str = METHOD) -> dict:
    """a, b: values of one metric (A control, B candidate; lists or {repeat: value})."""
    la, lb = _logs(a.values() if isinstance(a, dict) else a), _logs(b.values() if isinstance(b, dict) else b)
    out = {"method": method.replace("95 %", f"{confidence * 100:g} %"), "n_a": len(la), "n_b": len(lb), "ratio": None, "low": None, "high": None, "half_width_pct": None,
           "df": None, "outcome": INCONCLUSIVE, "reason": "", "threshold_pct": threshold_pct, "confidence": confidence, "better": better}  # fmt: skip
    if not la or not lb:
        out["reason"] = f"no positive values in {'A' if not la else 'B'}"
        return out
    ma, mb = sum(la) / len(la), sum(lb) / len(lb)
    d = mb - ma
    out["ratio"] = round(math.exp(d), 6)
    if len(la) < 2 or len(lb) < 2:
        out["reason"] = "fewer than 2 values on a side: no interval"
        return out
    va = sum((x - ma) ** 2 for x in la) / (len(la) - 1) / len(la)
    vb = sum((x - mb) ** 2 for x in lb) / (len(lb) - 1) / len(lb)
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(la) - 1) + vb**2 / (len(lb) - 1)) if se > 0 else float(len(la) + len(lb) - 2)
    hw = t_quantile(confidence, round(df, 3)) * se
    if exp_or_none(d + hw) is None or exp_or_none(hw) is None:
        out["reason"] = (f"{len(la)} vs {len(lb)} values: the log values spread too wide (se {se:.3g}) "
                         "for an interval in floating point")
        return out
    out.update(low=round(math.exp(d - hw), 6), high=round(math.exp(d + hw), 6), half_width_pct=round((math.exp(hw) - 1) * 100, 6), df=round(df, 3),
               se_log=se, p=_welch_p(d, se, round(df, 3)))
    margin = math.log1p(threshold_pct / 100)
    gain = (math.exp(d) - 1) * 100 * (-1.0 if better == "lower" else 1.0)
    ci = f"{math.exp(d):.4f} [{out['low']:.4f}, {out['high']:.4f}], {len(la)} vs {len(lb)} values, unpaired"
    if (d - hw > 0 or d + hw < 0) and abs(d) >= margin:
        out["outcome"] = IMPROVED if gain > 0 else REGRESSED
        out["reason"] = f"{ci}: the interval excludes 1 and {gain:+.2f}% is beyond the {threshold_pct:g}% threshold"
    elif -margin < d - hw and d + hw < margin:
        out["outcome"] = EQUIVALENT
        out["reason"] = f"{ci}: the whole interval lies inside +-{threshold_pct:g}%"
    else:
        out["reason"] = f"{ci}: the interval (+-{out['half_width_pct']:.2f}%) is neither clear of 1 beyond the threshold nor inside +-{threshold_pct:g}%"
    return out


def _welch_p(d: float, se: float, df: float) -> float:
    """Two-sided p of the Welch t test of no change (what the interval inverts)."""
    from scipy.special import stdtr

    if se == 0:
        return 0.0 if d != 0 else 1.0
    return float(2 * stdtr(df, -abs(d) / se))


def ratio_change(a_ratios: list[float], b_ratios: list[float], better: str = "higher", threshold_pct: float = 2.0, confidence: float = 0.95) -> dict:
    """How much an engine's paired ratio to its reference moved from run A to run B."""
    return welch(a_ratios, b_ratios, better, threshold_pct, confidence, CHANGE_METHOD)
