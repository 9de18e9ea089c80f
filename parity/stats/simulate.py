"""Synthetic A/B sessions drawn from recorded noise: how often the paired verdict
claims a change that is not there, and how often it finds one that is.

A noise source gives per-block log ratios of an A/A pair (no effect).  Two kinds:
- recorded block ratios (an A/A or A/B run's per-block log ratios): normal with
  their sample stdev (their mean, a real effect, is dropped);
- a recorded per-arm CV (the users' same-binary repeats), each arm normal.
An effect multiplies B by (1 + effect) in the direction that is better."""

from __future__ import annotations

import math
from dataclasses import dataclass

from parity.stats import adaptive, paired


@dataclass
class Noise:
    name: str
    source: str  # where the numbers were recorded
    block_logs: list[float] | None = None  # recorded per-block log ratios (centered here)
    arm_cv_pct: float | None = None  # or: a per-arm CV, each arm drawn normal

    def sd_log(self) -> float:
        if self.block_logs is not None:
            x = self.block_logs
            m = sum(x) / len(x)
            return math.sqrt(sum((v - m) ** 2 for v in x) / (len(x) - 1))
        return math.sqrt(2) * math.log1p(self.arm_cv_pct / 100)

    def draw(self, rng, n: int):
        import numpy as np

        if self.block_logs is not None:  # normal with the recorded spread: resampling 5 recorded blocks
            return rng.normal(0.0, self.sd_log(), n)  # repeats values and fakes tight intervals
        cv = self.arm_cv_pct / 100
        a, b = rng.normal(1.0, cv, n), rng.normal(1.0, cv, n)
        return np.log(np.clip(b, 1e-6, None) / np.clip(a, 1e-6, None))


def session(rng, noise: Noise, effect: float, budget: adaptive.Budget, threshold_pct: float) -> tuple[str, int]:
    """One synthetic session under the adaptive stop rule: (outcome, blocks)."""
    logs = list(noise.draw(rng, budget.max_blocks) + math.log1p(effect))
    n = budget.min_blocks
    while True:
        a = {i: 1.0 for i in range(n)}
        b = {i: math.exp(x) for i, x in enumerate(logs[:n])}
        p = paired.paired(a, b, "higher", threshold_pct)
        if adaptive.stop(budget, n, {"metric": p.stop_half_width_pct}) is not None:
            return p.outcome, n
        n += 1


def rates(noise: Noise, effect: float, budget: adaptive.Budget, sessions: int = 1000, threshold_pct: float = 2.0, seed: int = 1) -> dict:
    import numpy as np

    rng = np.random.default_rng(seed)
    counts = {o: 0 for o in paired.OUTCOMES}
    blocks = []
    for _ in range(sessions):
        o, n = session(rng, noise, effect, budget, threshold_pct)
        counts[o] += 1
        blocks.append(n)
    out = {o: counts[o] / sessions for o in paired.OUTCOMES}
    out["claims"] = out[paired.IMPROVED] + out[paired.REGRESSED]
    out["mean_blocks"] = sum(blocks) / sessions
    out["sessions"] = sessions
    return out


def logs_from_tsv(path: str, metric: str, n: int, a: str, b: str) -> list[float]:
    """Per-block log ratios b/a of one metric at one N from a parity_summary.tsv."""
    import csv

    with open(path) as f:
        rows = [r for r in csv.DictReader(f, delimiter="\t") if r["kind"] == "row" and r["n"] == str(n) and r.get("valid", "True") == "True"]
    va = {r["repeat"]: float(r[metric]) for r in rows if r["engine"] == a and r[metric]}
    vb = {r["repeat"]: float(r[metric]) for r in rows if r["engine"] == b and r[metric]}
    return [math.log(vb[k] / va[k]) for k in sorted(set(va) & set(vb))]
