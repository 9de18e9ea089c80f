"""Paired A/B statistics over blocks: the claim a same-session A/B can make.

A block is one repeat in which every arm ran once, back to back.  Per block the
ratio B/A of one metric; drift of the box that moves both arms of a block
cancels in it.  The estimate is the geometric mean of the block ratios, its
95 % interval a Student t interval on the log ratios.

Why t on logs and not a bootstrap: the sessions have 3-20 blocks, where a
percentile bootstrap's interval is too narrow (it cannot be wider than the
observed range, and undercovers at n < ~20), while the t interval is exact for
normal log ratios and robust enough for the mildly skewed ratios seen on
recorded runs (benchmarks/verdict_power.py measures its false-claim rate from
recorded noise).  Log ratios make A/B and B/A symmetric.

In a crossover (two GPUs at once, B's GPU swapped every block: parity.serving.crossover) a GPU's
own speed or power moves every block's ratio one way or the other by placement.  It cancels in an
estimate that weighs the two placements alike, and it is taken out of the spread: the t interval
uses the spread within each placement (n - 2 degrees of freedom), the textbook AB/BA crossover
analysis.  On the recorded two-H200 A/As it took J per token's per-block spread from 3.0 % to 0.43 %
and from 2.1 % to 0.64 %, and left TTFT and TPOT's about as they were (tests/unit/test_stats_crossover.py).

Three outcomes, each with its numbers:
- improved / regressed: the interval excludes 1 AND the estimate is beyond the
  practical threshold (default 2 %, the users' floor);
- equivalent: the whole interval lies inside +-threshold (a claim of no
  difference);
- inconclusive: neither, with the number of blocks that would settle it at
  the observed spread.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from functools import lru_cache

from parity.results.model import point_rows
from parity.stats import usable

IMPROVED, REGRESSED, EQUIVALENT, INCONCLUSIVE = "improved", "regressed", "equivalent", "inconclusive"
OUTCOMES = (IMPROVED, REGRESSED, EQUIVALENT, INCONCLUSIVE)
METHOD = "geometric mean of per-block ratios B/A; 95 % Student t interval on the log ratios"
METHOD_CROSSOVER = ("geometric mean of per-block ratios B/A, the two GPU placements weighed alike; 95 % Student t "
                    "interval on the log ratios' spread within each placement (n - 2 df)")
MAX_BLOCKS_ESTIMATE = 1000


@lru_cache(maxsize=512)
def t_quantile(confidence: float, df: int) -> float:
    # scipy.special's stdtrit is what scipy.stats.t.ppf calls; scipy.stats alone costs ~0.5 CPU-s
    # more to import, in every parity process that gives a verdict
    from scipy.special import stdtrit

    return float(stdtrit(df, 0.5 + confidence / 2))


@dataclass
class Paired:
    better: str  # "higher" | "lower": which direction of B/A is an improvement
    blocks: list = field(default_factory=list)  # block ids that had both arms
    ratios: list = field(default_factory=list)  # B/A per block, same order
    n_blocks: int = 0
    ratio: float | None = None  # geometric mean of the block ratios
    low: float | None = None  # interval on the ratio
    high: float | None = None
    half_width_pct: float | None = None  # (exp(t * s / sqrt(n)) - 1) x 100: the interval's half-width in log space, as %
    sd_log: float | None = None  # sample stdev of the log ratios
    stop_half_width_pct: float | None = None  # the same with a 90 % upper bound of the spread: what --until-ci compares
    confidence: float = 0.95
    threshold_pct: float = 2.0
    outcome: str = INCONCLUSIVE
    reason: str = ""
    blocks_needed: int | None = None  # inconclusive: blocks at which the observed spread would settle it
    method: str = METHOD
    by_placement: dict | None = None  # crossover: B/A's geometric mean over the blocks B ran on each GPU

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in ("ratio", "low", "high", "half_width_pct", "sd_log", "stop_half_width_pct"):
            if d[k] is not None:
                d[k] = round(d[k], 6)
        d["ratios"] = [round(r, 6) for r in d["ratios"]]
        return d


@lru_cache(maxsize=512)
def spread_upper(n: int, q: float = 0.10) -> float:
    """Factor from a sample stdev of n values to its one-sided (1-q) upper bound.  Stopping
    when the plain half-width first dips under the target picks runs of blocks that were
    quiet by luck (too-narrow intervals: 8.6 % A/A claims at a 3.85 % spread, simulated);
    stopping on this bound keeps that near the nominal 5 % (benchmarks/verdict_power.py)."""
    from scipy.special import gammaincinv  # chi2.ppf(q, k) = 2 gammaincinv(k/2, q), as scipy.stats computes it

    return math.sqrt((n - 1) / float(2 * gammaincinv((n - 1) / 2, q)))


def exp_or_none(x: float) -> float | None:
    """exp(x), or None past the floating-point range (an interval that wide bounds nothing)."""
    return math.exp(x) if x < 709 else None


def block_ratios(a: dict, b: dict) -> tuple[list, list[float]]:
    """(blocks, B/A) over blocks where both arms have a positive value the statistics hold (parity.stats.usable)."""
    ok = lambda v: usable(v) and v > 0  # noqa: E731
    common = sorted(k for k in set(a) & set(b) if ok(a[k]) and ok(b[k]))
    return common, [b[k] / a[k] for k in common]


def blocks_for(sd_log: float, target_log: float, confidence: float, have: int, stop_form: bool = False,
               lost: int = 0) -> int | None:
    """Smallest n > have with t(n-1) * sd / sqrt(n) < target, or with stop_form the conservative
    t(n-1) * sd * spread_upper(n) / sqrt(n) (None: beyond MAX_BLOCKS_ESTIMATE).  lost: degrees of
    freedom spent elsewhere (1 for a crossover's placement term; its placements taken as balanced)."""
    if target_log <= 0:
        return None
    if sd_log == 0:
        return max(have + 1, 2 + lost)
    z = t_quantile(confidence, 10**6)  # start from the normal approximation (t >= z, spread_upper >= 1), then walk up
    if z * sd_log / target_log > MAX_BLOCKS_ESTIMATE:  # n >= (z sd / target)^2: far past the estimate's cap
        return None
    n = max(have + 1, 2 + lost, math.ceil((z * sd_log / target_log) ** 2))
    while n <= MAX_BLOCKS_ESTIMATE:
        df = n - 1 - lost
        if t_quantile(confidence, df) * sd_log * (spread_upper(df + 1) if stop_form else 1) / math.sqrt(n) < target_log:
            return n
        n += 1
    return None


def stop_blocks_for(stop_pct: float, have: int, target_pct: float, confidence: float = 0.95) -> int | None:
    """Blocks at which a stop half-width of stop_pct after `have` blocks would reach target_pct, the
    spread staying as it is: blocks_for on the stop form, with sd read back from stop_pct.  None: past
    MAX_BLOCKS_ESTIMATE, or not estimable (fewer than 2 blocks)."""
    if have < 2 or stop_pct <= 0 or target_pct <= 0:
        return None
    sd = math.log1p(stop_pct / 100) * math.sqrt(have) / (t_quantile(confidence, have - 1) * spread_upper(have))
    return blocks_for(sd, math.log1p(target_pct / 100), confidence, have, stop_form=True)


def placements(blocks: list, logs: list[float], groups: dict | None) -> dict | None:
    """{GPU: its blocks' log ratios} when groups ({block: B's GPU}) names exactly two GPUs with at
    least two of these blocks each; None otherwise (no crossover, or too few blocks to split)."""
    if not groups:
        return None
    by: dict = {}
    for k, x in zip(blocks, logs):
        by.setdefault(groups.get(k), []).append(x)
    ok = len(by) == 2 and None not in by and all(len(v) >= 2 for v in by.values())
    return by if ok else None


def paired(a: dict, b: dict, better: str = "higher", threshold_pct: float = 2.0, confidence: float = 0.95,
           groups: dict | None = None) -> Paired:
    """a, b: {block: value} of one metric for the control (A) and the candidate (B).  groups: a
    crossover's {block: the GPU B ran on} (the module's docstring says what it changes)."""
    blocks, ratios = block_ratios(a, b)
    p = Paired(better=better, blocks=blocks, ratios=ratios, n_blocks=len(ratios), confidence=confidence, threshold_pct=threshold_pct)
    if not ratios:
        both = [k for k in set(a) & set(b) if a[k] is not None and b[k] is not None]
        p.reason = (f"no block has a ratio: in each of the {len(both)} blocks with both arms a value is 0 or "
                    "out of range" if both else "no block has both arms")
        return p
    logs = [math.log(r) for r in ratios]
    n, mean = len(logs), sum(logs) / len(logs)
    p.ratio = math.exp(mean)
    if n < 2:
        p.reason = "one block: no interval (need >= 2 blocks)"
        return p
    split, lost, scale = placements(blocks, logs, groups), 0, 1 / math.sqrt(n)
    if split:
        means = {g: sum(v) / len(v) for g, v in split.items()}
        mean, lost = sum(means.values()) / 2, 1
        p.ratio, p.method = math.exp(mean), METHOD_CROSSOVER
        p.by_placement = {str(g): round(math.exp(m), 6) for g, m in sorted(means.items())}
        sd = math.sqrt(sum((x - means[g]) ** 2 for g, v in split.items() for x in v) / (n - 2))
        scale = 0.5 * math.sqrt(sum(1 / len(v) for v in split.values()))
    else:
        sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
    df = n - 1 - lost
    hw = t_quantile(confidence, df) * sd * scale
    p.sd_log = sd
    high, wide, stop = exp_or_none(mean + hw), exp_or_none(hw), exp_or_none(hw * spread_upper(df + 1))
    if high is None or wide is None or stop is None:
        p.reason = f"{n} blocks: the log ratios spread too wide (sd {sd:.3g}) for an interval in floating point"
        return p
    p.low, p.high = math.exp(mean - hw), high
    p.half_width_pct = (wide - 1) * 100
    p.stop_half_width_pct = (stop - 1) * 100
    margin = math.log1p(threshold_pct / 100)
    sign = -1.0 if better == "lower" else 1.0
    gain = (p.ratio - 1) * 100 * sign  # positive = better
    ci = f"{p.ratio:.4f} [{p.low:.4f}, {p.high:.4f}], {n} blocks"
    if (p.low > 1 or p.high < 1) and abs(mean) >= margin:
        p.outcome = IMPROVED if gain > 0 else REGRESSED
        p.reason = f"{ci}: the interval excludes 1 and {gain:+.2f}% is beyond the {threshold_pct:g}% threshold"
    elif -margin < mean - hw and mean + hw < margin:
        p.outcome = EQUIVALENT
        p.reason = f"{ci}: the whole interval lies inside +-{threshold_pct:g}%"
    else:
        # settle it: exclude 1 with the estimate beyond the threshold, or fit inside +-threshold
        target = abs(mean) if abs(mean) >= margin else margin - abs(mean)
        p.blocks_needed = blocks_for(sd, target, confidence, n, lost=lost)
        more = f"about {p.blocks_needed} blocks at this spread would settle it" if p.blocks_needed else f"more than {MAX_BLOCKS_ESTIMATE} blocks at this spread (the estimate sits on the threshold)"
        if p.low > 1 or p.high < 1:
            p.reason = f"{ci}: a change, but {gain:+.2f}% is under the {threshold_pct:g}% threshold and the interval is not inside +-{threshold_pct:g}%; {more}"
        else:
            p.reason = f"{ci}: the interval (+-{p.half_width_pct:.2f}%) holds 1 and reaches past +-{threshold_pct:g}%; {more}"
    return p


def overall(outcomes) -> str:
    """One word for several metrics' outcomes: a regression wins, then an improvement;
    equivalent only when every metric is."""
    vs = list(outcomes)
    for o in (REGRESSED, IMPROVED):
        if o in vs:
            return o
    return EQUIVALENT if vs and all(v == EQUIVALENT for v in vs) else INCONCLUSIVE


def by_point(rows: list, reference: str, metrics: list[str], better, threshold_pct: float = 2.0, confidence: float = 0.95, key: str = "n") -> list[dict]:
    """Per engine (other than reference) x point (`key`: "n", a sweep's N, or "point", a workload's) x
    metric: the paired statistics of engine/reference over the blocks (rows' repeat) where both ran a
    valid point.  rows: PointRows (a flat dict is read as one); better(metric) -> "higher" | "lower"."""
    ok = [r for r in point_rows(rows) if r.valid and not r.discarded]  # discarded: the drift canary's (stats.canary)
    samples = [(r.engine, r.n if key == "n" else r.point, r.repeat, r.metrics) for r in ok]
    return by_sample(samples, reference, metrics, better, threshold_pct, confidence, key, gpus_of(ok))


def gpus_of(rows: list) -> dict:
    """{(engine, block): its GPU} of a crossover's rows (each has "gpu", read as a number); {} for one GPU."""
    typed = ((r, r.metrics.get("gpu", r.info.get("gpu"))) for r in point_rows(rows))
    return {(r.engine, r.repeat): g for r, g in typed if g is not None}


def placement_of(gpus: dict | None, engine: str) -> dict:
    """One engine's {block: GPU} out of gpus_of's {(engine, block): GPU}: paired's groups."""
    return {blk: g for (e, blk), g in (gpus or {}).items() if e == engine}


def by_sample(samples: list[tuple], reference: str, metrics: list[str], better, threshold_pct: float = 2.0,
              confidence: float = 0.95, key: str = "n", gpus: dict | None = None) -> list[dict]:
    """by_point over samples (engine, point, block, {metric: value}) of the counted rows; each
    result carries its point under `key`.  gpus: a crossover's {(engine, block): GPU} (gpus_of)."""
    out = []
    for eng in sorted({s[0] for s in samples} - {reference}):
        groups = placement_of(gpus, eng)
        for pt in sorted({s[1] for s in samples if s[0] == eng}):
            for m in metrics:
                cell = lambda e: {s[2]: s[3].get(m) for s in samples if s[0] == e and s[1] == pt}  # noqa: E731
                p = paired(cell(reference), cell(eng), better(m), threshold_pct, confidence, groups)
                out.append({"engine": eng, "reference": reference, "metric": m, **p.to_dict(), key: pt})
    return out
