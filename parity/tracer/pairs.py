"""Paired kernel buckets: which buckets carry a measured B/A difference, each with its interval.

Input, per arm and block: the difference method's bucket table (parity.profiles.analysis
.difference: long minus short capture of one arm in one block) and the engine's own decode
time over the same steps (llama-batched-bench T_TG of the long run minus the short run).
Per arm x block x bucket: ms per decoded token = delta_ms / (steps x npl).  The remainder is
the engine's decode time minus the sum of all kernel time: what the trace does not explain
(launch gaps, host work, overlap counted twice when negative), never spread over buckets.

Per bucket, over the blocks that hold both arms: the B-A difference in ms/token with a 95 %
Student t interval on the per-block differences, and the ratio B/A with parity.stats.paired's
interval.  Per block the buckets and the remainder add up to the engine's decode time exactly,
so the deltas add up to the engine's decode delta too (kernels + remainder = engine)."""

from __future__ import annotations

import math

from parity.stats.paired import paired, t_quantile

REMAINDER = "remainder"
KERNELS = "kernels (sum)"
ENGINE = "engine decode"
METHOD = ("per arm x block: bucket ms/token = (long - short capture) kernel ms / ((ntg_long - ntg_short) x npl); engine decode ms/token = "
          "(T_TG long - T_TG short) x 1000 / ((ntg_long - ntg_short) x npl); remainder = engine - sum of buckets; per bucket the B-A difference "
          "over blocks with a 95 % Student t interval on the per-block differences, and B/A with a t interval on the log ratios")  # fmt: skip


def mean_interval(values: list[float], confidence: float = 0.95) -> dict:
    """{mean, low, high, n, half_width}: Student t interval of the mean (None bounds under 2 values)."""
    v = [x for x in values if isinstance(x, (int, float)) and math.isfinite(x)]
    n = len(v)
    if not n:
        return {"mean": None, "low": None, "high": None, "n": 0, "half_width": None}
    m = sum(v) / n
    if n < 2:
        return {"mean": m, "low": None, "high": None, "n": 1, "half_width": None}
    sd = math.sqrt(sum((x - m) ** 2 for x in v) / (n - 1))
    h = t_quantile(confidence, n - 1) * sd / math.sqrt(n)
    return {"mean": m, "low": m - h, "high": m + h, "n": n, "half_width": h}


def arm_block(diff: dict, engine_ms_per_token: float | None) -> dict:
    """One arm in one block: {bucket: ms/token} plus kernels, engine and remainder (None when
    the engine's decode time is not known: its table row was lost)."""
    per = {r["bucket"]: r["us_per_token"] / 1000 for r in diff["buckets"]}
    kernels = diff["total"]["us_per_token"] / 1000
    rem = None if engine_ms_per_token is None else engine_ms_per_token - kernels
    return {"buckets": per, KERNELS: kernels, ENGINE: engine_ms_per_token, REMAINDER: rem, "steps": diff["steps"], "npl": diff["npl"]}


def engine_ms_per_token(long_rows: list[dict], short_rows: list[dict], steps: int, npl: int) -> float | None:
    """(T_TG long - T_TG short) x 1000 / (steps x npl) from llama-batched-bench rows (one row each)."""
    if len(long_rows) != 1 or len(short_rows) != 1:
        return None
    return (long_rows[0]["t_tg"] - short_rows[0]["t_tg"]) * 1000 / (steps * npl)


def paired_buckets(cells: dict, reference: str, candidate: str, order: list[str] | None = None, confidence: float = 0.95) -> dict:
    """cells: {(arm, block): arm_block(...)}.  Rows per bucket (then kernels, remainder, engine):
    each arm's mean ms/token, the B-A delta [low, high] and B/A [low, high] over common blocks."""
    blocks = sorted({b for (a, b) in cells if a == reference} & {b for (a, b) in cells if a == candidate})
    names = list(order or [])
    for (a, b), c in sorted(cells.items(), key=lambda kv: str(kv[0])):
        for n in c["buckets"]:
            if n not in names:
                names.append(n)

    def value(arm, block, name):
        c = cells[(arm, block)]
        return c["buckets"].get(name, 0.0) if name in names else c.get(name)

    rows = []
    for name in names + [KERNELS, REMAINDER, ENGINE]:
        av = {b: value(reference, b, name) for b in blocks}
        bv = {b: value(candidate, b, name) for b in blocks}
        both = [b for b in blocks if av[b] is not None and bv[b] is not None]
        d = mean_interval([bv[b] - av[b] for b in both], confidence)
        r = paired({b: av[b] for b in both}, {b: bv[b] for b in both}, better="lower", confidence=confidence)
        rows.append({
            "bucket": name, "kind": "bucket" if name in names else name,
            "a_ms_per_token": _mean([av[b] for b in both]), "b_ms_per_token": _mean([bv[b] for b in both]),
            "delta_ms_per_token": _r(d["mean"]), "delta_low": _r(d["low"]), "delta_high": _r(d["high"]), "blocks": d["n"],
            "ratio": _r(r.ratio), "ratio_low": _r(r.low), "ratio_high": _r(r.high),
            "excludes_zero": d["low"] is not None and (d["low"] > 0 or d["high"] < 0),
        })  # fmt: skip
    missing = [f"{a} block {b}" for (a, b), c in sorted(cells.items(), key=lambda kv: str(kv[0])) if c[ENGINE] is None]
    return {
        "reference": reference, "candidate": candidate, "blocks": blocks, "rows": rows, "method": METHOD, "confidence": confidence,
        "engine_time_missing": missing,
        "check": _check(rows),
    }  # fmt: skip


def _check(rows: list[dict]) -> dict:
    """The sum check: per arm, kernels + remainder = engine decode (exact per block, so on the means
    too); and how much of the engine's decode time the kernels explain."""
    by = {r["bucket"]: r for r in rows}
    out = {}
    for side in ("a", "b"):
        k, e = by[KERNELS][f"{side}_ms_per_token"], by[ENGINE][f"{side}_ms_per_token"]
        out[f"{side}_kernel_share_of_engine"] = None if not (k is not None and e) else round(k / e, 6)
    return out


def _mean(v: list) -> float | None:
    return _r(sum(v) / len(v)) if v else None


def _r(x):
    return None if x is None else round(x, 9)


def table_lines(doc: dict) -> list[str]:
    """The paired bucket table as text lines."""
    out = [f"{'bucket':<26} {doc['reference'] + ' ms/tok':>14} {doc['candidate'] + ' ms/tok':>14} {'B-A ms/tok [95 % interval]':>38} {'B/A [interval]':>28}"]
    for r in doc["rows"]:
        f = lambda x, p=5: "-" if x is None else f"{x:.{p}f}"  # noqa: E731
        iv = f"{f(r['delta_ms_per_token'])} [{f(r['delta_low'])}, {f(r['delta_high'])}]"
        rv = f"{f(r['ratio'], 4)} [{f(r['ratio_low'], 4)}, {f(r['ratio_high'], 4)}]"
        out.append(f"{r['bucket']:<26} {f(r['a_ms_per_token']):>14} {f(r['b_ms_per_token']):>14} {iv + (' *' if r['excludes_zero'] else ''):>38} {rv:>28}")
    out.append("* the interval excludes 0")
    return out
