"""The third link of the gap chain: the static (engine decode) difference, in ms per decoded
token, = the sum of the kernel buckets' differences + a remainder, each with its interval.

static delta: per block of the bench A/B, 1000/S_TG(B) - 1000/S_TG(A) (ms per token, untraced
runs), mean with a 95 % Student t interval.  Bucket deltas: the paired bucket table of a traced
profile of the same arms (parity.tracer.pairs).  remainder = static delta - sum of bucket
deltas: what the kernels do not explain (host time, launch gaps, the tracer's distortion,
drift between the two sessions).  The bench and the profile are separate sessions, so the
remainder's half-width is the two half-widths in quadrature (independent means)."""

from __future__ import annotations

import math

from parity.errors import UsageError
from parity.tracer.pairs import KERNELS, mean_interval

METHOD = ("static delta = mean over bench A/B blocks of 1000/S_TG(B) - 1000/S_TG(A) (ms/token), 95 % t interval; bucket deltas from the traced "
          "profile's paired blocks; remainder = static delta - sum of bucket deltas, half-width sqrt(h_static^2 + h_kernels^2) (independent sessions)")  # fmt: skip


def static_delta(rows: list[dict], engine: str, reference: str, b: int, confidence: float = 0.95) -> dict:
    """ms/token B - A at batch size b from bench A/B rows (engine, repeat, b, s_tg)."""
    ok = [r for r in rows if r.get("b") == b and isinstance(r.get("s_tg"), (int, float)) and r["s_tg"] > 0]
    a = {r.get("repeat", 0): 1000 / r["s_tg"] for r in ok if r.get("engine") == reference}
    z = {r.get("repeat", 0): 1000 / r["s_tg"] for r in ok if r.get("engine") == engine}
    both = sorted(set(a) & set(z))
    d = mean_interval([z[k] - a[k] for k in both], confidence)
    return {**d, "a_ms_per_token": _mean([a[k] for k in both]), "b_ms_per_token": _mean([z[k] for k in both])}


def _mean(v):
    return sum(v) / len(v) if v else None


def _oriented(pairs: dict, engine: str, reference: str) -> list[dict]:
    """The pairs' rows as engine - reference (flipped when the profile had the arms the other way)."""
    if (pairs["candidate"], pairs["reference"]) == (engine, reference):
        return pairs["rows"]
    if (pairs["candidate"], pairs["reference"]) == (reference, engine):
        neg = lambda x: None if x is None else -x  # noqa: E731
        return [{**r, "delta_ms_per_token": neg(r["delta_ms_per_token"]), "delta_low": neg(r["delta_high"]), "delta_high": neg(r["delta_low"])} for r in pairs["rows"]]
    raise UsageError(f"the profile's arms {pairs['candidate']}/{pairs['reference']} are not the bench's {engine}/{reference}")


def kernel_link(static: dict, pairs: dict, engine: str, reference: str) -> dict:
    """{"static", "buckets": [...], "kernels", "remainder", "reads"}: static = sum of buckets + remainder."""
    rows = _oriented(pairs, engine, reference)
    buckets = [_row(r["bucket"], r["delta_ms_per_token"], r["delta_low"], r["delta_high"], r["blocks"]) | {"ran": r.get("ran", True), "in_decode": r.get("in_decode")}
               for r in rows if r["kind"] == "bucket"]  # fmt: skip
    k = next(r for r in rows if r["bucket"] == KERNELS)
    hk = None if k["delta_low"] is None else (k["delta_high"] - k["delta_low"]) / 2
    hs = static.get("half_width")
    rem = None if static["mean"] is None or k["delta_ms_per_token"] is None else static["mean"] - k["delta_ms_per_token"]
    hr = math.hypot(hs, hk) if hs is not None and hk is not None else None
    remainder = _row("remainder", rem, None if hr is None or rem is None else rem - hr, None if hr is None or rem is None else rem + hr, None)
    total = _row("static", static["mean"], static["low"], static["high"], static["n"])
    kernels = _row("buckets (sum)", k["delta_ms_per_token"], k["delta_low"], k["delta_high"], k["blocks"])
    reads = ("no static delta (no bench block holds both arms at this B)" if static["mean"] is None
             else f"static {static['mean']:+.5f} ms/token = buckets {k['delta_ms_per_token']:+.5f} + remainder {rem:+.5f}")  # fmt: skip
    return {"engine": engine, "reference": reference, "static": total, "buckets": buckets, "kernels": kernels, "remainder": remainder, "reads": reads, "method": METHOD}


def _row(name, mean, low, high, n) -> dict:
    r = lambda x: None if x is None else round(x, 9)  # noqa: E731
    return {"link": name, "delta_ms_per_token": r(mean), "low": r(low), "high": r(high), "blocks": n,
            "excludes_zero": low is not None and high is not None and (low > 0 or high < 0)}  # fmt: skip


def lines(link: dict) -> list[str]:
    f = lambda x: "-" if x is None else f"{x:+.5f}"  # noqa: E731
    out = [f"kernels {link['engine']}/{link['reference']}: {link['reads']}", f"  {'link':<26} {'B-A ms/token':>14} {'95 % interval':>26}"]
    ran = [r for r in link["buckets"] if r.get("ran", True)]
    for r in [link["static"], *sorted(ran, key=lambda r: -abs(r["delta_ms_per_token"] or 0)), link["kernels"], link["remainder"]]:
        mark = " o" if r.get("in_decode") is False else (" *" if r["excludes_zero"] else "")
        out.append(f"  {r['link']:<26} {f(r['delta_ms_per_token']):>14} {'[' + f(r['low']) + ', ' + f(r['high']) + ']':>26}{mark}")
    off = [r["link"] for r in link["buckets"] if not r.get("ran", True)]
    out.append("  * the interval excludes 0; unmarked: wider than the value" + ("; o: no decode launches (prefill/warmup jitter)" if any(r.get("in_decode") is False for r in ran) else "")
               + (f"; not run in either arm: {', '.join(off)}" if off else ""))  # fmt: skip
    if link.get("steps_note"):
        out.append("  note: " + link["steps_note"])
    out.append("  method: " + link["method"])
    return out


def plot(link: dict, path: str, title: str = "") -> str:
    """One plot: the static delta, each bucket's delta and the remainder as bars with their intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ran = [r for r in link["buckets"] if r.get("ran", True)]  # buckets no arm ran are not bars of zero
    rows = [link["static"], *sorted(ran, key=lambda r: -abs(r["delta_ms_per_token"] or 0)), link["remainder"]]
    rows = [r for r in rows if r["delta_ms_per_token"] is not None]
    names = [r["link"] for r in rows]
    vals = [r["delta_ms_per_token"] for r in rows]
    err = [[(v - r["low"]) if r["low"] is not None else 0 for v, r in zip(vals, rows)], [(r["high"] - v) if r["high"] is not None else 0 for v, r in zip(vals, rows)]]
    colors = ["#444444" if r is link["static"] else "#c07030" if r is link["remainder"] else "#b0b0b0" if r.get("in_decode") is False else "#3070b0" for r in rows]
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(rows) + 1.5))
    ax.barh(range(len(rows)), vals, xerr=err, color=colors[: len(rows)], capsize=3)
    ax.set_yticks(range(len(rows)), names)
    ax.invert_yaxis()
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_xlabel(f"{link['engine']} - {link['reference']}: ms per decoded token (95 % interval)")
    ax.set_title(title or f"static = buckets + remainder ({link['engine']} vs {link['reference']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
