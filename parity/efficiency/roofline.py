"""Achieved memory bandwidth and % of the roofline per decode point.

A decode point runs B sequences at `rate` generated tokens/s in total: B tokens per step, so
steps/s = rate / B, and each step moves decode_bytes(model, context, B)["total"]
(parity.efficiency.bytes_per_token).  Achieved GB/s = steps/s x bytes/step / 1e9; % of the
roofline = achieved / peak, against the published figure and against the measured copy.

- llama-batched-bench: rate = S_TG of row (PP, TG, B); context = PP + TG/2 (the mean cache
  length over the TG steps).
- serving: rate = decode_agg_tps (median of valid repeats) at N; B = N; context = ptok + gen/2.
"""

from __future__ import annotations
from parity.efficiency.bytes_per_token import QUANTITIES, decode_bytes

DEFINITIONS = {
    "achieved_gbps": "decode steps/s (rate / B) x bytes one step moves (weights + B x (kv + state), see bytes_per_token) / 1e9",
    "pct_published": "achieved_gbps / the published peak of the GPU (parity.gpu.bandwidth.PUBLISHED, cited) x 100",
    "pct_measured": "achieved_gbps / the measured copy bandwidth (bandwidth.json: bytes read + written / best time) x 100",
    "serving": "rate = decode_agg_tps (median of valid repeats), B = N, context = ptok + gen/2",
    "bench": "rate = S_TG of llama-batched-bench row (PP, TG, B), context = PP + TG/2",
}


def point(model_path: str, rate: float | None, n_seqs: int, context: float, bw: dict | None, kv_type: str = "f16") -> dict:
    """One point: bytes per step, achieved GB/s, % of each peak (None with a reason where there is none)."""

    b = decode_bytes(model_path, context, n_seqs, kv_type)
    out = {"n": n_seqs, "context": context, "rate_tps": rate, "bytes_per_step": b["total"], "weights": b["weights"], "kv": b["kv"], "state": b["state"], "expert_share": b["expert_share"]}
    if not isinstance(rate, (int, float)) or rate <= 0:
        out.update(achieved_gbps=None, pct_published=None, pct_measured=None, why="no rate at this point")
        return out
    llc = (bw or {}).get("llc_bytes")
    if llc and b["total"] <= 2 * llc:  # CPU: the step's bytes (mostly) stay in the last-level cache
        out["cache_resident"] = f"{b['total'] / 1e6:.1f} MB per step <= 2 x the {llc >> 20} MiB last-level cache: DRAM bandwidth does not bound this point"
    gbps = rate / n_seqs * b["total"] / 1e9
    out["achieved_gbps"] = _sig(gbps)
    for key, which in (("pct_published", "published"), ("pct_measured", "measured")):
        peak = ((bw or {}).get(which) or {}).get("gbps")
        out[key] = _sig(100 * gbps / peak) if peak else None
    return out


def _sig(x: float, digits: int = 6) -> float:
    return float(f"{x:.{digits}g}")


def _peaks(bw: dict | None) -> dict:
    bw = bw or {}
    p, m = bw.get("published") or {}, bw.get("measured") or {}
    return {"published_gbps": p.get("gbps"), "published_source": p.get("source") or p.get("reason"), "measured_gbps": m.get("gbps"), "measured_method": m.get("method") or m.get("reason")}


def serving(medians: list[dict], model_path: str | None, ptok: int, gen: int, bw: dict | None, kv_type: str = "f16", metric: str = "decode_agg_tps") -> dict:
    """The summary's `efficiency` key from its medians (engine, n, decode_agg_tps) and the model file."""
    doc = {"kind": "serving", "model_file": model_path, "context": ptok + gen / 2, "rate_metric": metric, **_peaks(bw), "definitions": {**DEFINITIONS, **_bytes_definitions()}}
    if not model_path:
        doc.update(points=[], why="no GGUF model file to read the bytes per step from")
        return doc
    try:
        doc["points"] = [{"engine": m["engine"], **point(model_path, m.get(metric), m["n"], ptok + gen / 2, bw, kv_type)} for m in medians]
    except (OSError, ValueError, KeyError) as e:
        doc.update(points=[], why=f"{model_path}: cannot read the bytes per step ({type(e).__name__}: {e})")
    return doc


def bench(rows: list[dict], model_path: str, bw: dict | None, kv_type: str = "f16", engine: str | None = None) -> dict:
    """bench.json's `efficiency`: one point per batched-bench row."""
    doc = {"kind": "bench", "model_file": model_path, "rate_metric": "s_tg", **_peaks(bw), "definitions": {**DEFINITIONS, **_bytes_definitions()}}
    try:
        doc["points"] = [{"engine": engine, "pp": r["pp"], "tg": r["tg"], **point(model_path, r.get("s_tg"), r["b"], r["pp"] + r["tg"] / 2, bw, kv_type)} for r in rows]
    except (OSError, ValueError, KeyError) as e:
        doc.update(points=[], why=f"{model_path}: cannot read the bytes per step ({type(e).__name__}: {e})")
    return doc


def _bytes_definitions() -> dict:
    return {q.name: f"[{q.unit}] {q.formula}" for q in QUANTITIES.values()}


def lines(eff: dict | None) -> list[str]:
    """Human lines, one per point (what the CLI and a campaign print)."""
    if not eff:
        return []
    if eff.get("why") and not eff.get("points"):
        return [f"efficiency: {eff['why']}"]
    peak = []
    if eff.get("published_gbps"):
        peak.append(f"published {eff['published_gbps']:g} GB/s")
    if eff.get("measured_gbps"):
        peak.append(f"measured copy {eff['measured_gbps']:g} GB/s")
    out = [f"efficiency (% of the memory-bandwidth roofline; peaks: {', '.join(peak) or 'none'}):"]
    for p in eff.get("points") or []:
        where = f"N={p['n']}" if eff.get("kind") == "serving" else f"PP={p.get('pp')} TG={p.get('tg')} B={p['n']}"
        if p.get("achieved_gbps") is None:
            out.append(f"  {p.get('engine') or '':>8} {where}: {p.get('why')}")
            continue
        pct = lambda v: "-" if v is None else f"{v:.2f} %"  # noqa: E731
        out.append(f"  {p.get('engine') or '':>8} {where}: {p['bytes_per_step'] / 1e6:.3f} MB/step x {p['rate_tps'] / p['n']:.1f} steps/s = {p['achieved_gbps']:.3f} GB/s"
                   + (f" = {pct(p['pct_published'])} of published" if p.get("pct_published") is not None else "") + f" = {pct(p['pct_measured'])} of measured copy"
                   + (" [fits the last-level cache]" if p.get("cache_resident") else ""))  # fmt: skip
    mem = eff.get("memory")
    if mem:
        for e, m in (mem.get("engines") or {}).items():
            if m.get("not_applicable"):
                out.append(f"  memory {e}: {m.get('source')}")
                continue
            out.append(f"  memory {e}: peak {m.get('peak_mib')} MiB, steady {m.get('steady_mib')} MiB ({m.get('source')}; median of {m.get('arms')} arm(s))" + (" [reservation]" if m.get("note") else ""))
        for r in mem.get("ratios") or []:
            out.append(f"  memory {r['engine']}/{r['reference']}: " + (r["why"] if r.get("why") else f"peak x{r['peak']}, steady x{r['steady']}"))
    return out
