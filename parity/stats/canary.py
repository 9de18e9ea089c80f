"""A drift canary per block: a short fixed-cost probe before every arm of every block (the same
probe whatever the arm), its own noise learned across the blocks, and the blocks where it moved
beyond that noise.  The probe is a fixed loop on the host CPU: what it catches is a host whose CPU
time was taken away (a VM's vCPUs stolen, the server's threads starved), the disturbance seen in
the H100 A/A where two slow blocks out of 16 kept N=32's interval wide.

A sample is off when log(ms / median) exceeds max(k x 1.4826 x MAD of the log times, floor): the
median and MAD (a robust spread that one or two disturbed blocks do not inflate) are of every
sample of the run so far, so the canary needs `min_samples` before it judges.  Only a slower probe
is a disturbance: on the H100 a quiet A/A's probe ran in two modes (31-33 and 48-64 ms) while
every block measured alike, and the fast mode flagged a third of the blocks when both ways counted."""

from __future__ import annotations

import math
import statistics
import time
from parity.stats.paired import by_point

METHOD = "host CPU loop before every arm; a block is flagged when a sample is slower than the run's median by more than max({k:g} x 1.4826 x MAD, {floor:g} %) of the log times"
LOOP = 400_000  # iterations of the probe: ~20-40 ms of one core
POLICIES = ("flag", "discard", "off")


def host_probe(n: int = LOOP) -> float:
    """Milliseconds a fixed integer loop takes on this host, wall clock."""
    t0 = time.perf_counter()
    acc = 0
    for i in range(n):
        acc = (acc + i * i) % 1_000_003
    return (time.perf_counter() - t0) * 1000.0


def assess(samples: list[dict], k: float = 3.5, floor_pct: float = 5.0, min_samples: int = 6) -> dict:
    """samples: [{block, engine, ms}] in run order.  Returns {method, median_ms, mad_pct,
    threshold_pct, samples, flagged: [{block, engine, ms, off_pct}], blocks_flagged, overhead_ms_per_block}
    (no judgement under min_samples: flagged is [] and why says so)."""
    ms = [s["ms"] for s in samples if s.get("ms") and s["ms"] > 0]
    blocks = sorted({s["block"] for s in samples})
    out = {"method": METHOD.format(k=k, floor=floor_pct), "probe": f"{LOOP} iterations of an integer loop", "samples": samples, "flagged": [], "blocks_flagged": [],
           "median_ms": None, "mad_pct": None, "threshold_pct": None,
           "overhead_ms_per_block": round(sum(ms) / len(blocks), 2) if blocks else None}  # fmt: skip
    if len(ms) < min_samples:
        out["why"] = f"{len(ms)} samples: the canary judges from {min_samples}"
        return out
    logs = [math.log(v) for v in ms]
    med = statistics.median(logs)
    mad = statistics.median(abs(x - med) for x in logs) * 1.4826
    limit = max(k * mad, math.log1p(floor_pct / 100))
    out.update(median_ms=round(math.exp(med), 3), mad_pct=round((math.exp(mad) - 1) * 100, 3), threshold_pct=round((math.exp(limit) - 1) * 100, 3))
    for s in samples:
        if s.get("ms") and s["ms"] > 0 and math.log(s["ms"]) - med > limit:  # slower only: a faster host is no disturbance
            out["flagged"].append({**s, "off_pct": round((s["ms"] / math.exp(med) - 1) * 100, 2)})
    out["blocks_flagged"] = sorted({f["block"] for f in out["flagged"]})
    return out


def line(doc: dict | None) -> str | None:
    """One line for the run's output and report."""
    if not doc:
        return None
    if doc.get("why"):
        return f"drift canary: {doc['why']}"
    head = f"drift canary: probe median {doc['median_ms']:.1f} ms (robust spread {doc['mad_pct']:.1f} %, a block is flagged past {doc['threshold_pct']:.1f} %; {doc['overhead_ms_per_block']:.0f} ms a block)"
    if not doc["flagged"]:
        return head + "; no block flagged"
    worst = ", ".join(f"block {f['block']} before {f['engine']} {f['off_pct']:+.0f} %" for f in doc["flagged"])
    return head + f"; flagged: {worst}" + (f"; {doc['policy']}" if doc.get("policy") else "")


def discard(arms: list[dict], block: int, doc: dict) -> list[int]:
    """policy discard: when the canary flagged `block`, its rows leave the paired statistics (and
    so the stop rule, which then runs another block under --until-ci); they stay in the rows,
    marked.  Returns the blocks discarded so far."""
    if block in doc["blocks_flagged"]:
        why = "; ".join(f"drift canary {f['off_pct']:+.0f} % before {f['engine']}" for f in doc["flagged"] if f["block"] == block)
        for a in arms:
            for r in a["rows"]:
                if r.get("repeat") == block:
                    r["discarded"] = why
    return sorted({r["repeat"] for a in arms for r in a["rows"] if r.get("discarded")})


def with_and_without(summary: dict, metrics: list[str], direction, threshold_pct: float = 2.0, confidence: float = 0.95) -> list[dict]:
    """Each engine x N x metric's paired interval over every block and without the blocks the
    canary flagged: [{engine, n, metric, all: (ratio, low, high, blocks), kept: (...)}]; [] when none was flagged."""

    flagged = set(((summary.get("canary") or {}).get("blocks_flagged")) or [])
    ref = summary.get("reference_engine")
    if not flagged or not ref:
        return []
    rows = [{k: v for k, v in r.items() if k != "discarded"} for r in summary.get("rows") or []]
    pick = lambda p: (p.get("ratio"), p.get("low"), p.get("high"), p.get("n_blocks"))  # noqa: E731
    every = {(p["engine"], p["n"], p["metric"]): p for p in by_point(rows, ref, metrics, direction, threshold_pct, confidence)}
    kept = {(p["engine"], p["n"], p["metric"]): p for p in by_point([r for r in rows if r.get("repeat") not in flagged], ref, metrics, direction, threshold_pct, confidence)}
    return [{"engine": k[0], "n": k[1], "metric": k[2], "all": pick(every[k]), "kept": pick(kept[k]) if k in kept else None} for k in every]
