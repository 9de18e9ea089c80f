"""Split TTFT into its parts (parity.ttft.parts): one request from the client's record, the server's
timings and its log task; a point from its requests, or from the server's /metrics histogram means
where the engine gives no per-request clock (vLLM).  The remainder is what no clock covers: it is
always there, so the parts add up to the measured TTFT."""

from __future__ import annotations

from statistics import fmean

from parity.stats import percentile
from parity.ttft import llama_log
from parity.ttft.llama_log import Task, assign
from parity.ttft.parts import FLAG_SHARE, OUTSIDE, PARTS

DETAIL_KEYS = ("cache_update", "idle_save", "sampler_init")


def request(rec, task: Task | None) -> dict:
    """{part: ms or None} of one request with a first token, with detail and the client's first byte."""
    ttft = (rec.first - rec.send) * 1000
    t = rec.server_timings if isinstance(rec.server_timings, dict) else {}
    prompt = t.get("prompt_ms") if isinstance(t.get("prompt_ms"), (int, float)) else None
    out = {"ttft": ttft, "connect": rec.connect_ms or 0.0, "prompt": prompt,
           "host": task.host_ms if task else None, "queue": task.queue_ms if task else None,
           "cache_update": task.cache_update_ms if task else None, "idle_save": task.idle_save_ms if task else None,
           "sampler_init": task.sampler_init_ms if task else None,
           "first_byte": None if rec.first_byte is None else (rec.first_byte - rec.send) * 1000}  # fmt: skip
    out["remainder"] = ttft - sum(out[p] or 0.0 for p in PARTS if p != "remainder")
    return out


def _stat(vals: list[float], total: float | None) -> dict:
    mean = fmean(vals)
    share = round(mean / total, 4) if total else None
    return {"mean": round(mean, 3), "p99": round(percentile(vals, 99), 3), "share": share}


def _mean_only(v: float, total: float) -> dict:
    return {"mean": round(v, 3), "p99": None, "share": round(v / total, 4)}


def hist_means(family, before: dict | None, after: dict | None) -> dict:
    """The point's server-side means (ms) from the engine's /metrics histograms: ttft, queue, prefill."""
    out = {}
    for key in ("ttft", "queue", "prefill"):
        base = getattr(family, key, None) if family is not None else None
        if not base or before is None or after is None:
            out[key] = None
            continue
        n = after.get(f"{base}_count", 0.0) - before.get(f"{base}_count", 0.0)
        s = after.get(f"{base}_sum")
        out[key] = (s - before.get(f"{base}_sum", 0.0)) / n * 1000 if n and s is not None else None
    return out


def point(recs, tasks: dict[int, Task] | None = None, means: dict | None = None) -> dict:
    """The anatomy of one point: each part's mean and p99 over its valid requests (a histogram's
    part: its mean only), its share of the mean TTFT, and the flag when more than half of TTFT
    lies outside prompt compute."""
    ok = [r for r in recs if r.valid and r.first is not None]
    if not ok:
        return {"requests": 0, "parts": {}, "why": {"ttft": "no valid request"}, "flag": None, "held_by": None}
    per = [request(r, t) for r, t in zip(ok, assign(tasks or {}, ok))]
    total = fmean(p["ttft"] for p in per)
    doc: dict = {"requests": len(ok), "ttft": _stat([p["ttft"] for p in per], total), "parts": {}, "detail": {},
                 "why": {}}
    if all(p["prompt"] is not None for p in per):
        _from_requests(doc, per, total)
    else:
        _from_means(doc, per, total, means or {})
    fb = [p["first_byte"] for p in per if p["first_byte"] is not None]
    doc["client"] = {"first_byte": _stat(fb, total) if len(fb) == len(per) else None}
    return flag(doc)


def _from_requests(doc: dict, per: list[dict], total: float) -> None:
    """Every request has the server's timings (llama-server); host and queue where its log matched all."""
    logged = sum(p["host"] is not None for p in per)
    tail = f", its log for {logged}" if logged else ", no log task matched (host and queue stay in the remainder)"
    doc["source"] = f"llama-server timings of {len(per)} requests{tail}"
    for name in PARTS:
        vals = [p[name] for p in per]
        doc["parts"][name] = _stat(vals, total) if all(v is not None for v in vals) else None
        if doc["parts"][name] is None:
            doc["why"][name] = (f"{logged} of {len(per)} requests matched a task in the server's log: "
                                "the rest of the time stays in the remainder")
    if logged == len(per):
        doc["detail"] = {k: _stat([p[k] or 0.0 for p in per], total) for k in DETAIL_KEYS}
    known = [k for k in PARTS if k != "remainder" and doc["parts"].get(k)]
    doc["parts"]["remainder"] = _stat([p["ttft"] - sum(p[k] for k in known) for p in per], total)


def _from_means(doc: dict, per: list[dict], total: float, means: dict) -> None:
    """No per-request server clock: the server's histogram means (its TTFT, queue and prefill)."""
    connect = [p["connect"] for p in per]
    doc["parts"]["connect"] = _stat(connect, total)
    q, pre, st = means.get("queue"), means.get("prefill"), means.get("ttft")
    if st is None or q is None or pre is None:
        doc["source"] = "client only: the engine reports no per-request timings, no queue / prefill / TTFT histograms"
        for name in ("host", "queue", "prompt"):
            doc["parts"][name], doc["why"][name] = None, "no server clock for it"
        doc["parts"]["remainder"] = _mean_only(total - fmean(connect), total)
        return
    doc["source"] = "/metrics histogram means over the point (no per-request p99 on the server's side)"
    for name, v in (("host", st - q - pre), ("queue", q), ("prompt", pre), ("remainder", total - fmean(connect) - st)):
        doc["parts"][name] = _mean_only(v, total)


def flag(doc: dict) -> dict:
    """held_by: the largest part outside prompt compute when more than FLAG_SHARE of TTFT is outside it."""
    parts, total = doc["parts"], doc["ttft"]["mean"]
    doc["flag"] = doc["held_by"] = doc["outside_share"] = None
    if not parts.get("prompt") or not total:
        doc["why"].setdefault("flag", "no prompt-compute time: the share outside it is unknown")
        return doc
    prompt = parts["prompt"]["mean"]
    doc["outside_share"] = round(1 - prompt / total, 4)
    held = max((p for p in OUTSIDE if parts.get(p)), key=lambda p: parts[p]["mean"], default=None)
    if doc["outside_share"] > FLAG_SHARE and held is not None:
        doc["held_by"] = held
        doc["flag"] = (f"TTFT {total:.1f} ms is {doc['outside_share']:.0%} outside prompt compute ({prompt:.1f} ms): "
                       f"held by {held} ({parts[held]['mean']:.1f} ms)")
    return doc


def of_point(recs, log_path: str | None, offset: int | None, family, before: dict | None, after: dict | None) -> dict:
    """A served point's anatomy: its records, the server's log lines since offset (llama-server) and
    its /metrics histograms around it (vLLM)."""
    want = sum(isinstance(r.server_timings, dict) for r in recs if r.valid and r.first is not None)
    tasks = llama_log.read_since(log_path, offset, want) if want else {}
    return point(recs, tasks, hist_means(family, before, after))
