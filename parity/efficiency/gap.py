"""Where the gap lives: the serving ratio of two engines (B/A, decode_agg_tps) decomposed as

    serving ratio = static engine decode ratio (llama-batched-bench S_TG, GPU-steady)
                    x serving overhead ratio (serving / static)

Each link has its 95 % interval.  The serving and static ratios come from parity's paired
block statistics (parity.stats.paired: geometric mean of per-block ratios, t interval on
the log ratios, so each interval is symmetric in log space).  The overhead is a quotient of
two ratios measured in different sessions, i.e. independent: its log half-width is the two
log half-widths combined in quadrature, sqrt(h_serving^2 + h_static^2), an approximation
that treats each interval as a normal interval on the log scale (log-normal ratios)."""

from __future__ import annotations

import math

from parity import results
from parity.errors import UsageError
from parity.stats.paired import paired
from parity.tracer.chain import kernel_link, lines as kernel_lines, static_delta
from parity.tracer.pairs import from_captures

METHOD = ("serving = static x overhead; overhead = serving / static; intervals: paired block statistics per ratio (t interval on log "
          "ratios); the overhead's log half-width = sqrt(h_serving^2 + h_static^2) (independent sessions, log-normal ratios combined in quadrature)")  # fmt: skip


def half_width(ratio: float, low: float | None, high: float | None) -> float | None:
    """Half-width on the log scale of an interval [low, high] (None without one)."""
    if low is None or high is None or low <= 0 or high <= 0:
        return None
    return (math.log(high) - math.log(low)) / 2


def link(name: str, ratio: float, h: float | None, what: str) -> dict:
    out = {"link": name, "ratio": round(ratio, 6), "what": what}
    if h is None:
        out.update(low=None, high=None, half_width_pct=None)
    else:
        out.update(low=round(ratio * math.exp(-h), 6), high=round(ratio * math.exp(h), 6), half_width_pct=round((math.exp(h) - 1) * 100, 3))
    return out


def chain(serving: dict, static: dict, engine: str = "B", reference: str = "A") -> dict:
    """serving, static: {ratio, low, high} (B/A).  Returns the three links, each with its interval."""
    hs, hb = half_width(serving["ratio"], serving.get("low"), serving.get("high")), half_width(static["ratio"], static.get("low"), static.get("high"))
    ho = math.sqrt(hs**2 + hb**2) if hs is not None and hb is not None else None
    over = serving["ratio"] / static["ratio"]
    links = [
        link("serving", serving["ratio"], hs, f"{engine}/{reference} decode_agg_tps under the serving load"),
        link("static", static["ratio"], hb, f"{engine}/{reference} llama-batched-bench S_TG (engine decode, no server)"),
        link("overhead", over, ho, "serving / static: what the server path (HTTP, scheduling, batching) adds or loses"),
    ]
    return {"engine": engine, "reference": reference, "links": links, "method": METHOD,
            "reads": f"{serving['ratio']:.4f} = {static['ratio']:.4f} (static) x {over:.4f} (serving overhead)"}  # fmt: skip


def serving_ratio(summary: dict, engine: str, reference: str, n: int, metric: str = "decode_agg_tps") -> dict:
    """{ratio, low, high} of engine/reference at N from a snapshot summary's rows (paired blocks)."""

    ok = [r for r in summary.get("rows") or [] if r.get("valid", True) and r.get("n") == n]
    cell = lambda e: {r.get("repeat"): r.get(metric) for r in ok if r["engine"] == e}  # noqa: E731
    p = paired(cell(reference), cell(engine))
    return {"ratio": p.ratio, "low": p.low, "high": p.high, "blocks": p.n_blocks, "reason": p.reason}


def static_ratio(rows: list[dict], engine: str, reference: str, b: int, metric: str = "s_tg") -> dict:
    """{ratio, low, high} of engine/reference S_TG at B from batched-bench rows carrying
    `engine` and `repeat` (an A/B bench: rows of both engines, repeats as blocks)."""

    ok = [r for r in rows if r.get("b") == b]
    cell = lambda e: {r.get("repeat", 0): r.get(metric) for r in ok if r.get("engine") == e}  # noqa: E731
    p = paired(cell(reference), cell(engine))
    return {"ratio": p.ratio, "low": p.low, "high": p.high, "blocks": p.n_blocks, "reason": p.reason}


def lines(doc: dict) -> list[str]:
    out = [f"gap {doc['engine']}/{doc['reference']}: {doc['reads']}"]
    for lk in doc["links"]:
        iv = f"[{lk['low']:.4f}, {lk['high']:.4f}] (+-{lk['half_width_pct']:.2f} %)" if lk["low"] is not None else "(no interval)"
        out.append(f"  {lk['link']:>8}: {lk['ratio']:.4f} {iv}  {lk['what']}")
    out.append(f"  method: {doc['method']}")
    if doc.get("kernels"):
        out += kernel_lines(doc["kernels"])
    return out


def between_runs(serving_dir: str, bench_dir: str, kernels_dir: str | None = None) -> dict:
    """`parity gap`: for the engines both runs hold (the serving run's reference and each
    other engine), at every N the serving sweep has and the batched-bench A/B ran as B,
    the chain serving = static x overhead with each link's interval; with kernels_dir (a
    paired `parity profile --engines` run of the same arms), at its npl the third link:
    static delta = kernel bucket deltas + remainder (parity.tracer.chain)."""

    def load(d: str, name: str, read, what: str) -> dict:
        p = results.run_dir(d) / name
        if not p.exists():
            raise UsageError(f"{d}: no {name} (expected a {what} run directory)")
        return read(p).data

    summary, bench = load(serving_dir, "summary.json", results.read_summary, "snapshot"), load(bench_dir, "bench.json", results.read_bench, "bench A/B")
    ref = summary.get("reference_engine")
    if not ref or not bench.get("rows") or bench.get("reference") is None:
        raise UsageError("parity gap needs a two-engine serving sweep and a two-engine bench A/B (parity bench --engines A,B)")
    served, benched = {r["engine"] for r in summary.get("rows") or []}, {str(r.get("engine")) for r in bench["rows"]}
    engines = sorted(served & benched - {ref})
    if ref not in benched or not engines:
        raise UsageError(f"the runs share no engine pair: serving {sorted(served)}, bench {sorted(benched)}")
    out, missing = [], []
    for e in engines:
        for n in sorted({r["n"] for r in summary["rows"]} & {r["b"] for r in bench["rows"]}):
            serving, static = serving_ratio(summary, e, ref, n), static_ratio(bench["rows"], e, ref, n)
            gaps = [f"no {what} {e}/{ref} at N={n} ({r['reason']})" for what, r in (("serving decode_agg_tps ratio", serving), ("static S_TG ratio", static)) if r["ratio"] is None]
            if gaps:
                missing += gaps
                continue
            out.append({"n": n, **chain(serving, static, e, ref)})
    if not out and not missing:
        raise UsageError("no N of the serving sweep is a batch size B of the bench A/B (bench --npl should list the sweep's N)")
    if kernels_dir:
        kernels_link(out, bench, kernels_dir)
    return {"serving_run": str(serving_dir), "bench_run": str(bench_dir), "model": summary.get("model"), "bench_model": bench.get("model"), "points": out, "missing": missing, "method": METHOD}


def check_complete(doc: dict) -> None:
    """A gap with a point it cannot answer is not an answer: one line naming each (exit 2)."""
    if doc["missing"]:
        raise UsageError(f"gap incomplete: {'; '.join(doc['missing'])}" + (f" (answered at N={', '.join(str(p['n']) for p in doc['points'])})" if doc["points"] else ""))


def kernels_link(points: list[dict], bench: dict, kernels_dir: str) -> None:
    """Adds p["kernels"] (static = buckets + remainder) at the point whose N is the profile's npl."""
    d = results.run_dir(kernels_dir) / "profile"
    try:
        pairs = results.load_json(d / "paired_buckets.json")
        analysis = results.load_json(d / "analysis.json")
        npl = analysis["captures"][0]["npl"]
    except (IndexError, KeyError, TypeError, ValueError) as e:  # BadResultFile is a ValueError
        raise UsageError(f"{kernels_dir}: not a paired profile run (parity profile --engines A,B): {e}") from None
    hit = [p for p in points if p["n"] == npl]
    if not hit:
        raise UsageError(f"{kernels_dir}: the profile ran npl {npl}, which is no N of the serving sweep and B of the bench A/B")
    if pairs.get("rows") and "ran" not in pairs["rows"][0]:  # written before buckets were marked (ran, in decode): recomputed from the captures

        pairs = from_captures(analysis["captures"], analysis["difference"], pairs["reference"], pairs["candidate"], order=[r["bucket"] for r in pairs["rows"] if r["kind"] == "bucket"])
    for p in hit:
        p["kernels"] = kernel_link(static_delta(bench["rows"], p["engine"], p["reference"], npl), pairs, p["engine"], p["reference"])
        p["kernels"]["steps_note"] = steps_note(bench["rows"], analysis, npl)


def steps_note(bench_rows: list[dict], analysis: dict, npl: int) -> str | None:
    """A line when the bench's decode steps are not the profile's: per-token costs depend on the
    context length, so the static delta and the bucket deltas then average different positions."""
    prof = {(d.get("ntg_short"), d.get("ntg_long")) for d in analysis.get("difference") or []}
    pp = {w.get("pp") for c in analysis.get("captures") or [] for w in c.get("workload_rows") or []}
    bench = {(r.get("pp"), r.get("tg")) for r in bench_rows if r.get("b") == npl}
    if len(prof) != 1 or len(pp) != 1 or len(bench) != 1:
        return None
    ((short, long),), (npp,), ((bpp, btg),) = prof, pp, bench
    if (bpp, btg) == (npp, long) and short == 0:
        return None
    return (f"the static delta averages the bench's decode steps 1-{btg} after a {bpp}-token prompt, the bucket deltas the profile's steps "
            f"{short + 1}-{long} after {npp}: per-token costs that grow with the context differ between the two, and the remainder holds the difference")  # fmt: skip
