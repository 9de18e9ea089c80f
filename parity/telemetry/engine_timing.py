"""The engine's own clock beside the client's, per point: tells client noise from engine noise.

llama-server returns per-request `timings` (RequestRecord.server_timings: predicted_n,
predicted_ms from the first sampled token to the last, prompt_ms); vLLM's /metrics
histograms give the point's mean end-to-end and decode time (deltas around the point).
Each figure is declared once here (DEFINITIONS) and the report prints them from it;
they go to row["engine_timing"] (they need the server's answers, not only the records)."""

from __future__ import annotations

from statistics import fmean

DEFINITIONS: dict[str, tuple[str, str]] = {
    "engine_decode_tps_mean": ("tok/s", "mean over valid requests of llama-server's timings.predicted_per_second (predicted_n / predicted_ms)"),
    "engine_perseq_tps_mean": ("tok/s", "mean over valid requests of (timings.predicted_n - 1) / timings.predicted_ms: the engine-clock twin of decode_perseq_tps"),
    "engine_decode_ms_mean": ("ms", "llama: mean timings.predicted_ms (first sampled token -> last); vLLM: mean of vllm:request_decode_time_seconds over the point"),
    "client_decode_ms_mean": ("ms", "mean over valid requests of (last token arrival - first token arrival) at the client"),
    "decode_overhead_ms_mean": ("ms", "client_decode_ms_mean - engine_decode_ms_mean: decode time the client saw beyond the engine's own clock (HTTP, streaming, the client's event loop)"),
    "engine_e2e_ms_mean": ("ms", "llama: mean timings.prompt_ms + timings.predicted_ms; vLLM: mean of vllm:e2e_request_latency_seconds over the point"),
    "client_e2e_ms_mean": ("ms", "mean over valid requests of (last token arrival - send)"),
    "client_overhead_ms_mean": ("ms", "client_e2e_ms_mean - engine_e2e_ms_mean: what the client adds to a request end to end (queueing before the engine's clock starts included)"),
}


def _mean(xs) -> float | None:
    xs = [x for x in xs if isinstance(x, (int, float))]
    return round(fmean(xs), 3) if xs else None


def _diff(a, b) -> float | None:
    return None if a is None or b is None else round(a - b, 3)


def _hist_mean_ms(before: dict | None, after: dict | None, base: str) -> float | None:
    if before is None or after is None:
        return None
    n = after.get(f"{base}_count", 0.0) - before.get(f"{base}_count", 0.0)
    s = after.get(f"{base}_sum")
    if not n or s is None:
        return None
    return round((s - before.get(f"{base}_sum", 0.0)) / n * 1000, 3)


def compute(recs, family=None, before: dict | None = None, after: dict | None = None) -> dict:
    """{figure: value or None, "why": {figure: reason}} over the valid records of a point;
    family: what the engine's /metrics calls its decode and end-to-end histograms (its kind says)."""
    ok = [r for r in recs if r.valid and r.first is not None and r.end is not None]
    out: dict = {
        "client_decode_ms_mean": _mean((r.end - r.first) * 1000 for r in ok),
        "client_e2e_ms_mean": _mean((r.end - r.send) * 1000 for r in ok),
    }
    timed = [r.server_timings for r in ok if isinstance(r.server_timings, dict) and isinstance(r.server_timings.get("predicted_ms"), (int, float))]
    if timed:
        out["engine_decode_tps_mean"] = _mean(t.get("predicted_per_second") for t in timed)
        out["engine_perseq_tps_mean"] = _mean((t["predicted_n"] - 1) / (t["predicted_ms"] / 1000) for t in timed if t.get("predicted_n", 0) > 1 and t["predicted_ms"] > 0)
        out["engine_decode_ms_mean"] = _mean(t["predicted_ms"] for t in timed)
        out["engine_e2e_ms_mean"] = _mean(t.get("prompt_ms", 0) + t["predicted_ms"] for t in timed)
        out["source"] = f"llama-server timings of {len(timed)}/{len(ok)} valid requests"
    elif family is not None and (family.decode or family.e2e):
        out["engine_decode_ms_mean"] = _hist_mean_ms(before, after, family.decode) if family.decode else None
        out["engine_e2e_ms_mean"] = _hist_mean_ms(before, after, family.e2e) if family.e2e else None
        out["source"] = f"/metrics histograms {family.decode or '-'}, {family.e2e or '-'} (deltas over the point)"
    out["decode_overhead_ms_mean"] = _diff(out["client_decode_ms_mean"], out.get("engine_decode_ms_mean"))
    out["client_overhead_ms_mean"] = _diff(out["client_e2e_ms_mean"], out.get("engine_e2e_ms_mean"))
    why = {}
    for k in DEFINITIONS:
        if out.get(k) is None:
            out[k] = None
            why[k] = "no valid request" if not ok else ("the engine reports no per-request timings and no /metrics histogram for it" if "engine" in k or "overhead" in k else "not computed")
    out["why"] = why
    return out


def definitions() -> list[dict]:
    return [{"name": k, "unit": u, "formula": f} for k, (u, f) in DEFINITIONS.items()]
