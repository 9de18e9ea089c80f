"""The prefill curve's lines (parity.workloads.prefill_curve): per curve (the client's TTFT, the
engine's own prompt time), engine and N, a least-squares line through every valid block's points
(parity.stats.linfit) and each block's own line; engine / reference of the blocks' prefill tok/s
and intercepts paired over the blocks (parity.stats.paired); the engine's own prompt rate and the
users' prefill_tps beside them; the plot and the report's tables.  Pure: rows in, data out.

A point's y is the median over its requests (a busy box's stalls move a mean): ttft_p50_ms, and
llama-server's timings.prompt_ms (engine_prompt_ms_p50) against the prompt tokens it computed
(timings.prompt_n); an engine without per-request timings (vLLM) gives its /metrics prefill
histogram's mean over the point (server_prefill_ms_mean) against the tokens sent."""

from __future__ import annotations

import statistics
from pathlib import Path

from parity.stats import linfit
from parity.stats.paired import paired
from parity.workloads.plots import num, pyplot, save

CURVES = {"ttft": "TTFT (client)", "prompt": "engine prompt time"}
PAIRED = (("prefill_tps", "block_prefill_tps", "higher"), ("intercept_ms", "block_intercept_ms", "lower"))


def point_xy(r: dict, curve: str) -> tuple[float | None, float | None, str]:
    """(x, y, source) of one row on a curve.  The TTFT curve's x is the prompt tokens of a round (N x
    the length): N prompts sent at once are computed together and each first token waits for them,
    so its slope is the prompt rate over the round (as the users' prefill_tps counts it).  The engine
    curve's x is one request's computed tokens: its timings clock that request (at N > 1 with what
    the server batched beside it)."""
    if curve == "ttft":
        return (r.get("concurrency") or 1) * r["prompt_len"], r.get("ttft_p50_ms"), "client TTFT, median per point"
    if num(r.get("engine_prompt_ms_p50")):
        x = r.get("engine_prompt_n_mean") or r["prompt_len"]
        return x, r["engine_prompt_ms_p50"], "timings.prompt_ms, median per point"
    return r["prompt_len"], r.get("server_prefill_ms_mean"), "/metrics prefill histogram, mean per point"


def counted(rows: list[dict]) -> list[dict]:
    """The rows a fit reads: valid, not discarded by the drift canary, of a prefill-curve point."""
    return [r for r in rows if r.get("valid", True) and not r.get("discarded") and num(r.get("prompt_len"))]


def series(rows: list[dict], curve: str) -> dict[tuple[str, int], dict]:
    """(engine, N) -> {"blocks": {block: [(x, y)]}, "lengths": [(length, x, y)], "source"}."""
    out: dict[tuple[str, int], dict] = {}
    for r in counted(rows):
        x, y, source = point_xy(r, curve)
        if num(x) and num(y):
            s = out.setdefault((r["engine"], r["concurrency"]), {"blocks": {}, "lengths": [], "source": source})
            s["blocks"].setdefault(r["repeat"], []).append((x, y))
            s["lengths"].append((r["prompt_len"], x, y))
    return out


def median(vals) -> float | None:
    v = [x for x in vals if num(x)]
    return round(statistics.median(v), 4) if v else None


def own_rates(rows: list[dict], engine: str, conc: int) -> dict:
    """Medians over the blocks of the engine's own prompt tok/s at the longest length (its timings, else
    the tokens sent over its /metrics prefill mean), its mean over lengths, and the users' prefill_tps
    (a round's prompt tokens / its longest TTFT) at the longest length."""
    rs = [r for r in counted(rows) if r["engine"] == engine and r.get("concurrency") == conc]
    if not rs:
        return {}
    longest = max(r["prompt_len"] for r in rs)
    per_len: dict[int, list] = {}
    for r in rs:
        tps, ms = r.get("engine_prompt_tps"), r.get("server_prefill_ms_mean")
        if not num(tps) and num(ms) and ms > 0:
            tps = r["prompt_len"] / ms * 1000
        per_len.setdefault(r["prompt_len"], []).append(tps)
    meds = [m for m in (median(v) for v in per_len.values()) if m is not None]
    users = median(r.get("users_prefill_tps") for r in rs if r["prompt_len"] == longest)
    return {"longest": longest, "engine_tps_longest": median(per_len[longest]),
            "engine_tps_mean": round(statistics.fmean(meds), 4) if meds else None, "users_prefill_tps_longest": users}


def top_rate(lengths: list[tuple[int, float, float]]) -> float | None:
    """The marginal prefill tok/s between the two longest lengths (medians of x and y per length):
    above the line's rate where the points bend upward (attention's cost grows with the length)."""
    by: dict[int, list[tuple[float, float]]] = {}
    for length, x, y in lengths:
        by.setdefault(length, []).append((x, y))
    if len(by) < 2:
        return None
    (x0, y0), (x1, y1) = [tuple(statistics.median(p[i] for p in by[k]) for i in (0, 1)) for k in sorted(by)[-2:]]
    return round(1000 * (x1 - x0) / (y1 - y0), 4) if x1 > x0 and y1 > y0 else None


def fits(rows: list[dict], confidence: float = 0.95) -> list[dict]:
    """Per curve x engine x N: the line through every counted block's points, and each block's own."""
    out = []
    for curve in CURVES:
        for (eng, conc), s in sorted(series(rows, curve).items()):
            pts = [p for b in sorted(s["blocks"]) for p in s["blocks"][b]]
            f = linfit.line([x for x, _ in pts], [y for _, y in pts], confidence)
            rate = linfit.rate(f)
            per_block = {b: linfit.line(*zip(*v), confidence) for b, v in sorted(s["blocks"].items())}
            block_tps = {b: round(1000 / g.slope, 4) for b, g in per_block.items() if g.slope and g.slope > 0}
            block_icpt = {b: round(g.intercept, 4) for b, g in per_block.items() if g.intercept is not None}
            fit = {"curve": curve, "engine": eng, "n": conc, "source": s["source"], "blocks": sorted(s["blocks"]), **f.to_dict(),
                   "prefill_tps": rate["rate"], "prefill_tps_low": rate["low"], "prefill_tps_high": rate["high"],
                   "block_prefill_tps": block_tps, "block_intercept_ms": block_icpt, "top_tps": top_rate(s["lengths"]),
                   **own_rates(rows, eng, conc)}
            # a round's TTFT rate at N > 1 is N requests' and the engine's own is one request's: no comparison
            own = fit.get("engine_tps_longest")
            if (curve == "prompt" or conc == 1) and num(fit["prefill_tps"]) and num(own) and own:
                fit["vs_engine_longest_pct"] = round((fit["prefill_tps"] / own - 1) * 100, 3)
            out.append(fit)
    return engine_line(out)


def engine_line(fitted: list[dict]) -> list[dict]:
    """At N=1 the TTFT line's tok/s against the engine-time line's, fitted through the same requests:
    both are marginal rates (ms per added prompt token), so what they differ by is the client-side
    cost that grows with the prompt (upload, parsing, tokenization), not the engine's fixed cost per
    prompt, which the engine's own tok/s at one length still holds (vs_engine_longest_pct)."""
    prompt = {(f["engine"], f["n"]): f for f in fitted if f["curve"] == "prompt"}
    for f in fitted:
        other = prompt.get((f["engine"], f["n"]))
        if f["curve"] == "ttft" and f["n"] == 1 and other and num(f["prefill_tps"]) and num(other["prefill_tps"]) and other["prefill_tps"] > 0:
            f["engine_line_tps"] = other["prefill_tps"]
            f["vs_engine_line_pct"] = round((f["prefill_tps"] / other["prefill_tps"] - 1) * 100, 3)
    return fitted


def paired_fits(fitted: list[dict], reference: str | None, threshold_pct: float, confidence: float) -> list[dict]:
    """engine / reference of the blocks' prefill tok/s and intercepts, paired over the blocks; the
    intercepts' difference too (an intercept may be 0 or negative, which no ratio holds)."""
    if not reference:
        return []
    ref = {(f["curve"], f["n"]): f for f in fitted if f["engine"] == reference}
    out = []
    for f in fitted:
        a = ref.get((f["curve"], f["n"]))
        if f["engine"] == reference or a is None:
            continue
        head = {"curve": f["curve"], "engine": f["engine"], "reference": reference, "n": f["n"]}
        for metric, key, better in PAIRED:
            p = paired(a[key], f[key], better, threshold_pct, confidence).to_dict()
            held = sorted(k for k in set(a[key]) & set(f[key]) if not (a[key][k] > 0 and f[key][k] > 0))
            if held:  # a ratio holds positive values only: say which blocks it left out
                why = f"{metric} <= 0 in block(s) {', '.join(map(str, held))}: a ratio cannot hold them"
                why += " (intercept_diff_ms does)" if metric == "intercept_ms" else ""
                p["reason"] = why if not p["n_blocks"] else f"{p['reason']}; {why}"
            out.append({**head, "metric": metric, **p})
        d = linfit.difference(a["block_intercept_ms"], f["block_intercept_ms"], confidence)
        out.append({**head, "metric": "intercept_diff_ms", **d})
    return out


def different_prompts(rows: list[dict]) -> list[str]:
    """Blocks x points whose engines were sent different token ids (their tokenizers differ)."""
    by: dict[tuple, dict[str, str]] = {}
    for r in rows:
        if r.get("prompt_digest"):
            by.setdefault((r["repeat"], r["point"]), {})[r["engine"]] = r["prompt_digest"]
    return [f"block {b} {pt}: " + ", ".join(f"{e} {d}" for e, d in sorted(ds.items()))
            for (b, pt), ds in sorted(by.items()) if len(set(ds.values())) > 1]  # fmt: skip


def fmt_num(v) -> str:
    return "-" if not num(v) else f"{v:.4g}" if abs(v) < 1000 else f"{v:.0f}"


def bounds(lo, hi, none: str = "") -> str:
    return f" [{fmt_num(lo)}, {fmt_num(hi)}]" if lo is not None or hi is not None else none


def line_text(f: dict) -> str:
    """'stock N=1 TTFT (client): 5353 tok/s [4534, 6533], overhead 2.1 ms [0.4, 3.9]; at 1024 ...'."""
    head = f"{f['engine']} N={f['n']} {CURVES[f['curve']]}"
    if f.get("prefill_tps") is None:
        return f"{head}: no rate ({f.get('reason') or 'slope <= 0'})"
    rate = bounds(f["prefill_tps_low"], f["prefill_tps_high"], " (no interval)")
    fixed = bounds(f["intercept_low"], f["intercept_high"])
    text = f"{head}: {fmt_num(f['prefill_tps'])} tok/s{rate}, overhead {fmt_num(f['intercept'])} ms{fixed}"
    if num(f.get("vs_engine_line_pct")):
        text += f"; {f['vs_engine_line_pct']:+.1f} % from the engine-time line's {fmt_num(f['engine_line_tps'])} tok/s"
    if f["curve"] == "ttft" and f.get("longest"):
        text += (f"; at {f['longest']} tokens the engine's own {fmt_num(f.get('engine_tps_longest'))} tok/s, "
                 f"the users' prefill_tps (theirs) {fmt_num(f.get('users_prefill_tps_longest'))}")
    return text


def paired_lines(pc: dict) -> list[str]:
    """'paged/stock N=1 TTFT (client) prefill_tps: 1.0213x [0.9900, 1.0500] equivalent (6 blocks)'."""
    out = []
    for p in pc.get("paired") or []:
        head = f"{p['engine']}/{p['reference']} N={p['n']} {CURVES[p['curve']]} {p['metric']}"
        if p["metric"] == "intercept_diff_ms":
            why = f"; {p['reason']}" if p.get("reason") else ""
            iv = bounds(p["low"], p["high"])
            out.append(f"{head}: {fmt_num(p.get('diff'))} ms{iv} ({p['n_blocks']} blocks{why})")
        elif p.get("ratio") is None or p.get("low") is None:
            est = "-" if p.get("ratio") is None else f"{p['ratio']:.4f}x"
            out.append(f"{head}: {est} ({p.get('reason')})")
        else:
            iv = f"[{p['low']:.4f}, {p['high']:.4f}]"
            out.append(f"{head}: {p['ratio']:.4f}x {iv} {p['outcome']} ({p['n_blocks']} blocks)")
    return out


def summary(rows: list[dict], reference: str | None, threshold_pct: float, confidence: float) -> dict:
    fitted = fits(rows, confidence)
    pairs = paired_fits(fitted, reference, threshold_pct, confidence)
    return {"method": linfit.METHOD, "fits": fitted, "paired": pairs, "different_prompts": different_prompts(rows),
            "lines": [line_text(f) for f in fitted]}


# ------------------------------------------------------------------ the report

LINE_HEAD = ["engine", "N", "curve", "y per point", "prefill tok/s = 1000 / slope [interval]",
             "overhead ms = intercept [interval]", "R2", "points / blocks", "tok/s between the two longest lengths",
             "engine's own prompt tok/s at the longest length", "engine's own, mean over lengths",
             "users' prefill_tps at the longest length (theirs: a round's prompt tokens / its longest TTFT)"]
PAIRED_HEAD = ["engine", "reference", "N", "curve", "metric", "B/A (B - A for a difference) [interval]", "outcome",
               "blocks", "why"]


def estimate(p: dict, iv) -> str:
    """A paired entry's estimate with its interval: the ratio, or a difference's B - A."""
    v = p.get("ratio") if "ratio" in p else p.get("diff")
    return "-" if v is None else iv(v, p.get("low"), p.get("high"))


def tables(pc: dict, fmt) -> list[dict]:
    """The lines, and engine / reference paired over the blocks, as the report's tables."""

    def iv(v, lo, hi) -> str:
        return f"{fmt(v)} [{fmt(lo)}, {fmt(hi)}]" if lo is not None or hi is not None else fmt(v)

    rows = [[f["engine"], f["n"], CURVES[f["curve"]], f.get("source"),
             iv(f.get("prefill_tps"), f.get("prefill_tps_low"), f.get("prefill_tps_high")),
             iv(f.get("intercept"), f.get("intercept_low"), f.get("intercept_high")), fmt(f.get("r2")),
             f"{f.get('points')} / {len(f.get('blocks') or [])}", fmt(f.get("top_tps")),
             fmt(f.get("engine_tps_longest")), fmt(f.get("engine_tps_mean")), fmt(f.get("users_prefill_tps_longest"))]
            for f in pc.get("fits") or []]
    prs = [[p["engine"], p["reference"], p["n"], CURVES[p["curve"]], p["metric"], estimate(p, iv),
            p.get("outcome") or "-", p.get("n_blocks"), p.get("reason")] for p in pc.get("paired") or []]
    return [{"title": "Prefill curve: the fitted lines", "head": LINE_HEAD, "rows": rows},
            {"title": "Prefill curve: engine / reference, paired over blocks", "head": PAIRED_HEAD, "rows": prs}]


def curve_plot(rows: list[dict], path: Path) -> Path | None:
    """TTFT and the engine's prompt time against prompt tokens, per engine and N: every block's points,
    the fitted line and its interval band (N=1 solid, N=n dashed)."""
    fitted = [f for f in fits(rows) if f.get("slope") is not None]
    if not fitted:
        return None
    fig, axs = pyplot().subplots(1, 2, figsize=(11, 4.2))
    fig.subplots_adjust(left=0.07, right=0.98, top=0.88, bottom=0.13, wspace=0.22)
    colors: dict[str, object] = {}
    for ax, curve in zip(axs, CURVES):
        data = series(rows, curve)
        for f in (f for f in fitted if f["curve"] == curve):
            pts = [p for v in data[(f["engine"], f["n"])]["blocks"].values() for p in v]
            marker = "o" if f["n"] == 1 else "^"
            sc = ax.scatter(*zip(*pts), s=12, marker=marker, color=colors.get(f["engine"]))
            color = colors.setdefault(f["engine"], sc.get_facecolor()[0])
            line = linfit.Fit(**{k: f[k] for k in ("points", "slope", "intercept", "s", "x_mean", "sxx", "confidence")})
            lo, hi = min(x for x, _ in pts), max(x for x, _ in pts)
            xs = [lo + (hi - lo) * i / 40 for i in range(41)]
            label = f"{f['engine']} N={f['n']}: {fmt_num(f['prefill_tps'])} tok/s, +{fmt_num(f['intercept'])} ms"
            ax.plot(xs, [line.at(x) for x in xs], "-" if f["n"] == 1 else "--", color=color, label=label)
            band = [line.band(x) for x in xs]
            if all(b is not None for b in band):
                ax.fill_between(xs, [b[0] for b in band], [b[1] for b in band], color=color, alpha=0.15)
        one = "prompt tokens of one request, as the engine computed them"
        ax.set_xlabel(one if curve == "prompt" else "prompt tokens of a round (N x length)")
        ax.set_ylabel(f"{CURVES[curve]}, ms")
        band_pct = f"{fitted[0]['confidence'] * 100:g} %"
        ax.set_title(f"{CURVES[curve]} vs prompt length (band: {band_pct} interval of the line)", fontsize="small")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="x-small")
    return save(fig, path)
