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
from parity.stats import family


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


# ----------------------------------------------------------------- families of cells


@dataclass
class Family:
    """Cells one verdict reads, with their recorded per-block log ratios side by side (one row per
    block, one column per cell): a session draws whole blocks, so cells measured in one block
    keep the correlation they had (decode and aggregate throughput move together)."""

    name: str
    source: str
    cells: list[str]
    blocks: list[list[float]]  # recorded blocks x cells, log ratios

    def draw(self, rng, n: int):
        """n blocks x cells, normal with the recorded covariance (centered: no effect)."""
        import numpy as np

        d = np.asarray(self.blocks, float)
        d = d - d.mean(axis=0)
        w = rng.normal(0.0, 1.0, (n, d.shape[0]))
        return w @ d / math.sqrt(d.shape[0] - 1)


def family_session(rng, fam: Family, budget: adaptive.Budget, threshold_pct: float, alpha: float) -> tuple[bool, bool, int]:
    """One A/A session over the family: (any cell claimed per cell, any claimed under Holm, blocks).
    The stop rule waits on every cell's half-width, as --until-ci does."""

    logs = fam.draw(rng, budget.max_blocks)
    n = budget.min_blocks
    while True:
        cells = []
        for j, name in enumerate(fam.cells):
            p = paired.paired({i: 1.0 for i in range(n)}, {i: math.exp(x) for i, x in enumerate(logs[:n, j])}, "higher", threshold_pct, 1 - alpha)
            cells.append(p.to_dict())
        if adaptive.stop(budget, n, {c: x["stop_half_width_pct"] for c, x in zip(fam.cells, cells)}) is not None:
            claims = (paired.IMPROVED, paired.REGRESSED)
            return any(c["outcome"] in claims for c in cells), any(c["outcome"] in claims for c in family.adjust(cells, alpha)), n
        n += 1


def family_rates(fam: Family, budget: adaptive.Budget, sessions: int = 1000, threshold_pct: float = 2.0, alpha: float = 0.05, seed: int = 1) -> dict:
    """The family-wise false-claim rate of A/A sessions: per cell (before) and under Holm (after)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    before = after = 0
    blocks = []
    for _ in range(sessions):
        b, a, n = family_session(rng, fam, budget, threshold_pct, alpha)
        before += b
        after += a
        blocks.append(n)
    return {"before": before / sessions, "after": after / sessions, "mean_blocks": sum(blocks) / sessions, "sessions": sessions}


def family_from_tsv(path: str, metrics: list[str], a: str, b: str) -> Family:
    """Every N x metric of a parity_summary.tsv, b/a per block."""
    import csv

    with open(path) as f:
        rows = [r for r in csv.DictReader(f, delimiter="\t") if r["kind"] == "row" and r.get("valid", "True") == "True"]
    ns = sorted({int(r["n"]) for r in rows})
    val = {(r["engine"], int(r["n"]), r["repeat"], m): float(r[m]) for r in rows for m in metrics if r.get(m)}
    reps = sorted({r["repeat"] for r in rows}, key=int)
    cells = [(n, m) for n in ns for m in metrics]
    blocks = [[math.log(val[(b, n, k, m)] / val[(a, n, k, m)]) for n, m in cells] for k in reps if all((e, n, k, m) in val for e in (a, b) for n, m in cells)]
    return Family(f"{len(cells)} cells: N {'/'.join(map(str, ns))} x {', '.join(metrics)}", path, [f"N={n} {m}" for n, m in cells], blocks)


def family_from_bench(path: str, metric: str = "s_tg") -> Family:
    """Every point (PP x TG x B) of a bench.json A/B, candidate/reference per block."""
    import json

    doc = json.loads(open(path).read())
    ref, cand = doc["reference"], next(e for e in doc["engines"] if e != doc["reference"])
    val = {(r["engine"], r["repeat"], (r["pp"], r["tg"], r["b"])): r[metric] for r in doc["rows"]}
    points = sorted({k[2] for k in val})
    reps = sorted({k[1] for k in val})
    blocks = [[math.log(val[(cand, k, pt)] / val[(ref, k, pt)]) for pt in points] for k in reps if all((e, k, pt) in val for e in (ref, cand) for pt in points)]
    return Family(f"{len(points)} points: {metric} at B {'/'.join(str(p[2]) for p in points)}", path, [f"PP={p[0]} TG={p[1]} B={p[2]}" for p in points], blocks)
