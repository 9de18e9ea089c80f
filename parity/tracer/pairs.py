"""Paired kernel buckets: which buckets carry a measured B/A difference, each with its interval.

Input, per arm and block: the difference method's bucket table (parity.profiles.analysis
.difference: long minus short capture of one arm in one block) and the engine's own decode
time over the same steps (llama-batched-bench's TG time of the long run minus the short run,
read off S_TG, which the tool prints to 5-6 digits, not T_TG's 1 ms).
Per arm x block x bucket: ms per decoded token = delta_ms / (steps x npl).  The remainder is
the engine's decode time minus the sum of all kernel time: what the trace does not explain
(launch gaps, host work, overlap counted twice when negative), never spread over buckets.

Per bucket, over the blocks that hold both arms: the B-A difference in ms/token with a 95 %
Student t interval on the per-block differences, and the ratio B/A with parity.stats.paired's
interval.  Per block the buckets and the remainder add up to the engine's decode time exactly,
so the deltas add up to the engine's decode delta too (kernels + remainder = engine).

What the numbers can and cannot say (the H100 captures in docs/evidence/device-h100-cupti):
a bucket whose launches are the same in the long and the short capture in every block ran no
decode step; its "ms/token" is the run-to-run jitter of its prefill/warmup kernels divided by
the decode tokens, so it is marked, and it may be negative.  The remainder carries the jitter
of the engine's wall time, one-off costs at the first decode steps (graph capture and
instantiation, lazily loaded kernels) that cancel between the long and the short run only on
average; kernel time jitters far less, so the remainder's interval is the wide one.  A block
whose kernels exceed the engine's decode time is named in `noise`."""

from __future__ import annotations

import math

from parity.stats.paired import paired, t_quantile

REMAINDER = "remainder"
KERNELS = "kernels (sum)"
ENGINE = "engine decode"
METHOD = ("per arm x block: bucket ms/token = (long - short capture) kernel ms / ((ntg_long - ntg_short) x npl); engine decode ms/token = "
          "(TG time long - TG time short) x 1000 / ((ntg_long - ntg_short) x npl), TG time = TG x B / S_TG of llama-batched-bench; remainder = engine - sum of buckets; per bucket the B-A difference "
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


def arm_block(diff: dict, engine_ms_per_token: float | None, tg_seconds: tuple | None = None) -> dict:
    """One arm in one block: {bucket: ms/token} plus kernels, engine and remainder (None when
    the engine's decode time is not known: its table row was lost), each bucket's extra launches
    in the long capture, and the two runs' TG seconds the engine time came from."""
    per = {r["bucket"]: r["us_per_token"] / 1000 for r in diff["buckets"]}
    launches = {r["bucket"]: r["delta_launches"] for r in diff["buckets"]}
    kernels = diff["total"]["us_per_token"] / 1000
    rem = None if engine_ms_per_token is None else engine_ms_per_token - kernels
    return {"buckets": per, "launches": launches, KERNELS: kernels, ENGINE: engine_ms_per_token, REMAINDER: rem, "steps": diff["steps"], "npl": diff["npl"],
            "tg_seconds": list(tg_seconds) if tg_seconds else None}  # fmt: skip


def tg_seconds(row: dict) -> float | None:
    """A llama-batched-bench row's decode (TG) time in seconds: TG x B / S_TG (S_TG = B x TG / t_tg,
    printed with 2 decimals: 5-6 significant digits), else its T_TG column (3 decimals: 1 ms)."""
    s, tg, b = row.get("s_tg"), row.get("tg"), row.get("b")
    if isinstance(s, (int, float)) and s > 0 and tg and b:
        return tg * b / s
    t = row.get("t_tg")
    return t if isinstance(t, (int, float)) and t > 0 else None


def engine_seconds(long_rows: list[dict], short_rows: list[dict]) -> tuple[float, float] | None:
    """(TG seconds of the long run, of the short run) from their one table row each."""
    if len(long_rows) != 1 or len(short_rows) != 1:
        return None
    a, b = tg_seconds(long_rows[0]), tg_seconds(short_rows[0])
    return None if a is None or b is None else (a, b)


def engine_ms_per_token(long_rows: list[dict], short_rows: list[dict], steps: int, npl: int) -> float | None:
    """(TG time long - TG time short) x 1000 / (steps x npl) from llama-batched-bench rows (one row each)."""
    t = engine_seconds(long_rows, short_rows)
    return None if t is None else (t[0] - t[1]) * 1000 / (steps * npl)


def from_captures(captures: list[dict], diffs: list[dict], reference: str, candidate: str, order: list[str] | None = None) -> dict:
    """The paired table from a profile's analysis.json parts: its captures (engine, block,
    llama-batched-bench rows) and the difference of each arm and block."""
    by_label = {c["label"]: c for c in captures}
    cells = {}
    for d in diffs:
        long, short = by_label[d["long"]], by_label[d["short"]]
        lr, sr = long.get("workload_rows") or [], short.get("workload_rows") or []
        cells[(long["engine"], long.get("block") or 0)] = arm_block(d, engine_ms_per_token(lr, sr, d["steps"], d["npl"]), engine_seconds(lr, sr))
    return paired_buckets(cells, reference, candidate, order=order)


def paired_buckets(cells: dict, reference: str, candidate: str, order: list[str] | None = None, confidence: float = 0.95) -> dict:
    """cells: {(arm, block): arm_block(...)}.  Rows per bucket (then kernels, remainder, engine):
    each arm's mean ms/token, the B-A delta [low, high] and B/A [low, high] over common blocks;
    per bucket whether it ran at all and whether it ran in decode (extra launches in the long
    capture of some cell), per arm and block the engine/kernels/remainder split, and the noise
    notes (what the intervals can and cannot resolve)."""
    blocks = sorted({b for (a, b) in cells if a == reference} & {b for (a, b) in cells if a == candidate})
    names = list(order or [])
    for (a, b), c in sorted(cells.items(), key=lambda kv: str(kv[0])):
        for n in c["buckets"]:
            if n not in names:
                names.append(n)
    used = [cells[(arm, b)] for b in blocks for arm in (reference, candidate)]
    ran = {n for c in used for n in c["buckets"]}
    in_decode = {n for c in used for n, d in (c.get("launches") or {}).items() if d}
    known = all(c.get("launches") is not None for c in used)  # cells of an older paired_buckets.json lack launches

    def value(arm, block, name):
        c = cells[(arm, block)]
        return c["buckets"].get(name, 0.0) if name in names else c.get(name)

    rows = []
    for name in names + [KERNELS, REMAINDER, ENGINE]:
        av = {b: value(reference, b, name) for b in blocks}
        bv = {b: value(candidate, b, name) for b in blocks}
        both = [b for b in blocks if av[b] is not None and bv[b] is not None]
        d = mean_interval([bv[b] - av[b] for b in both], confidence)
        is_bucket = name in names
        decode = True if not is_bucket else (name in in_decode if known and name in ran else None)  # None: not known, or never ran
        r = _ratio({b: av[b] for b in both}, {b: bv[b] for b in both}, confidence) if decode is not False and (not is_bucket or name in ran) else None
        rows.append({
            "bucket": name, "kind": "bucket" if is_bucket else name, "ran": (name in ran) if is_bucket else True, "in_decode": decode,
            "a_ms_per_token": _mean([av[b] for b in both]), "b_ms_per_token": _mean([bv[b] for b in both]),
            "delta_ms_per_token": _r(d["mean"]), "delta_low": _r(d["low"]), "delta_high": _r(d["high"]), "blocks": d["n"],
            "ratio": _r(r.ratio) if r else None, "ratio_low": _r(r.low) if r else None, "ratio_high": _r(r.high) if r else None,
            "excludes_zero": d["low"] is not None and (d["low"] > 0 or d["high"] < 0),
        })  # fmt: skip
    missing = [f"{a} block {b}" for (a, b), c in sorted(cells.items(), key=lambda kv: str(kv[0])) if c[ENGINE] is None]
    per_block = {arm: {str(b): {k: _r(cells[(arm, b)].get(k)) for k in (ENGINE, KERNELS, REMAINDER)} | {"tg_seconds": cells[(arm, b)].get("tg_seconds")} for b in blocks}
                 for arm in (reference, candidate)}  # fmt: skip
    return {
        "reference": reference, "candidate": candidate, "blocks": blocks, "rows": rows, "method": METHOD, "confidence": confidence,
        "engine_time_missing": missing, "per_block": per_block,
        "t_quantile": _r(t_quantile(confidence, len(blocks) - 1)) if len(blocks) > 1 else None,
        "noise": _noise(rows, per_block, blocks, confidence),
        "check": _check(rows),
    }  # fmt: skip


def _ratio(a: dict, b: dict, confidence: float):
    """B/A over the blocks, or None when a block's value is not positive in an arm (a ratio over
    the remaining blocks would be read as one over all of them)."""
    if not a or any(not (isinstance(v, (int, float)) and v > 0) for v in [*a.values(), *b.values()]):
        return None
    return paired(a, b, better="lower", confidence=confidence)


def _noise(rows: list[dict], per_block: dict, blocks: list, confidence: float) -> list[str]:
    """One line per thing the intervals cannot resolve, for the report."""
    out = []
    n = len(blocks)
    if n >= 2:
        q = t_quantile(confidence, n - 1)
        out.append(f"{n} blocks: a {confidence:.0%} interval is the mean +- {q:.2f} x sd / sqrt({n}) of the per-block differences"
                   + (f" (3 blocks: {t_quantile(confidence, 2):.2f}, 5: {t_quantile(confidence, 4):.2f})" if n < 3 else ""))  # fmt: skip
    off = [r["bucket"] for r in rows if r["kind"] == "bucket" and r["ran"] and r["in_decode"] is False and (r["a_ms_per_token"] or r["b_ms_per_token"])]
    if off:
        out.append(f"no decode launches (the same launches in the long and the short capture of every block; their ms/token is prefill/warmup jitter, "
                   f"may be negative, and has no ratio): {', '.join(off)}")  # fmt: skip
    for arm, per in per_block.items():
        for b, c in per.items():
            if c[REMAINDER] is not None and c[REMAINDER] < 0:
                tg = c.get("tg_seconds")
                why = f" (TG {tg[0]:.4f} s long, {tg[1]:.4f} s short)" if tg else ""
                out.append(f"{arm} block {b}: the kernels ({c[KERNELS]:.5f} ms/token) exceed the engine's decode time ({c[ENGINE]:.5f}){why}: costs outside "
                           "the decode steps (one-off costs of the first steps, host gaps) did not cancel between the two runs; the remainder's interval carries it")  # fmt: skip
    rem = next((r for r in rows if r["bucket"] == REMAINDER), None)
    k = next((r for r in rows if r["bucket"] == KERNELS), None)
    if rem and k and None not in (rem["delta_low"], k["delta_low"]) and (rem["delta_high"] - rem["delta_low"]) > 3 * (k["delta_high"] - k["delta_low"]):
        out.append(f"the remainder's interval ({rem['delta_high'] - rem['delta_low']:.5f} ms/token wide) is {(rem['delta_high'] - rem['delta_low']) / max(k['delta_high'] - k['delta_low'], 1e-12):.0f}x "
                   "the kernels': the engine's wall time jitters by more than its kernels do; a longer ntg_long (more steps) or more blocks narrow it")  # fmt: skip
    return out


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
    """The paired bucket table as text lines: buckets that ran, the sums, the per-block split of
    engine decode time, and the noise notes."""
    out = [f"{'bucket':<26} {doc['reference'] + ' ms/tok':>14} {doc['candidate'] + ' ms/tok':>14} {'B-A ms/tok [95 % interval]':>38} {'B/A [interval]':>28}"]
    f = lambda x, p=5: "-" if x is None else f"{x:.{p}f}"  # noqa: E731
    for r in doc["rows"]:
        if not r.get("ran", True):
            continue
        iv = f"{f(r['delta_ms_per_token'])} [{f(r['delta_low'])}, {f(r['delta_high'])}]"
        rv = f"{f(r['ratio'], 4)} [{f(r['ratio_low'], 4)}, {f(r['ratio_high'], 4)}]"
        mark = " o" if r.get("in_decode") is False else (" *" if r["excludes_zero"] else "")
        out.append(f"{r['bucket']:<26} {f(r['a_ms_per_token']):>14} {f(r['b_ms_per_token']):>14} {iv + mark:>38} {rv:>28}")
    skipped = [r["bucket"] for r in doc["rows"] if not r.get("ran", True)]
    out.append("* the interval excludes 0; unmarked: the interval is wider than the value (not resolved at these blocks)"
               + ("; o: no decode launches (prefill/warmup jitter, not a decode cost)" if any(r.get("in_decode") is False and r.get("ran", True) for r in doc["rows"]) else ""))  # fmt: skip
    if skipped:
        out.append(f"not run in either arm: {', '.join(skipped)}")
    for arm, per in (doc.get("per_block") or {}).items():
        cells = [f"b{b} {f(c[ENGINE])} = {f(c[KERNELS])} + {f(c[REMAINDER])}" for b, c in per.items()]
        out.append(f"{arm} per block, engine decode = kernels + remainder (ms/token): " + "; ".join(cells))
    for ln in doc.get("noise") or []:
        out.append("noise: " + ln)
    return out
