"""A drift canary per block: a short fixed-cost probe before every arm of every block (the same
probe whatever the arm), its own noise learned across the blocks, and the blocks where it moved
beyond that noise.  The probe is a fixed loop on the host CPU, timed twice: by the wall clock and by
the thread's own CPU clock.  What it catches is a host whose CPU time was taken away (a VM's vCPUs
stolen, the server's threads starved): the loop then waits for a core, and its wall time stretches
past its CPU time.  The stretch, not the wall time, is judged: on the H100 the wall time alone ran
in two modes (28-33 and 45-64 ms) on quiet blocks, which put its bar at +206 % and hid blocks whose
busy loops cost the server 9-23 % of its decode rate (tests/data/canary).

A sample is off when log(wall / cpu) exceeds the run's median by more than max(k x 1.4826 x MAD of
those logs, floor): the median and MAD (a robust spread that one or two disturbed blocks do not
inflate) are of every sample of the run so far, so the canary needs `min_samples` before it judges.
Only a stretched probe is a disturbance; a sample without a CPU time (a run before the CPU clock
was read) is judged by its wall time, as it was."""

from __future__ import annotations

import math
import statistics
import time
from parity.results.model import point_rows
from parity.stats.paired import by_sample, gpus_of

WALL_METHOD = "host CPU loop before every arm; a block is flagged when a sample is slower than the run's median by more than max({k:g} x 1.4826 x MAD, {floor:g} %) of the log times"
METHOD = "host CPU loop before every arm, timed by the wall clock and by its thread's CPU clock; a block is flagged when a sample's wall/CPU stretch exceeds the run's median by more than max({k:g} x 1.4826 x MAD, {floor:g} %) of the logs"
LOOP = 400_000  # iterations of the probe: ~30-90 ms of one core
POLICIES = ("flag", "discard", "off")


def host_probe(n: int = LOOP) -> tuple[float, float]:
    """(wall ms, CPU ms) of a fixed integer loop on this host: the CPU clock is this thread's own."""
    t0, c0 = time.perf_counter(), time.thread_time()
    acc = 0
    for i in range(n):
        acc = (acc + i * i) % 1_000_003
    return (time.perf_counter() - t0) * 1000.0, (time.thread_time() - c0) * 1000.0


def sample(block: int, engine: str) -> dict:
    """One probe as the canary stores it: {block, engine, ms (wall), cpu_ms}."""
    wall, cpu = host_probe()
    return {"block": block, "engine": engine, "ms": round(wall, 3), "cpu_ms": round(cpu, 3)}


def _wall(s: dict) -> float | None:
    ms = s.get("ms")
    return ms if isinstance(ms, (int, float)) and ms > 0 else None


def stretch(s: dict) -> float | None:
    """A sample's wall / CPU time (None when either is missing or not positive)."""
    ms, cpu = _wall(s), s.get("cpu_ms")
    return ms / cpu if ms is not None and isinstance(cpu, (int, float)) and cpu > 0 else None


def assess(samples: list[dict], k: float = 3.5, floor_pct: float | None = None, min_samples: int = 6) -> dict:
    """samples: [{block, engine, ms, cpu_ms}] in run order.  Returns {method, judged, median_ms,
    median_stretch, mad_pct, threshold_pct, samples, flagged: [{block, engine, ms, cpu_ms, off_pct}],
    blocks_flagged, overhead_ms_per_block} (no judgement under min_samples: flagged is [] and why
    says so).  The floor is 15 % of stretch (a probe that waited that share of its CPU time for a
    core), or 5 % of wall time for samples without a CPU time."""
    by_cpu = bool(samples) and all(s.get("cpu_ms") is not None for s in samples)
    floor = floor_pct if floor_pct is not None else (15.0 if by_cpu else 5.0)
    value = stretch if by_cpu else _wall
    judged = [(s, v) for s in samples if (v := value(s)) is not None]
    walls = [s["ms"] for s, _ in judged]
    blocks = sorted({s["block"] for s in samples})
    out = {"method": METHOD.format(k=k, floor=floor) if by_cpu else WALL_METHOD.format(k=k, floor=floor), "judged": "stretch" if by_cpu else "wall",
           "probe": f"{LOOP} iterations of an integer loop", "samples": samples, "flagged": [], "blocks_flagged": [],
           "median_ms": round(statistics.median(walls), 3) if walls else None, "median_stretch": None, "mad_pct": None, "threshold_pct": None,
           "overhead_ms_per_block": round(sum(walls) / len(blocks), 2) if blocks else None}  # fmt: skip
    if len(judged) < min_samples:
        out["why"] = f"{len(judged)} samples: the canary judges from {min_samples}"
        return out
    logs = [math.log(v) for _, v in judged]
    med = statistics.median(logs)
    mad = statistics.median(abs(x - med) for x in logs) * 1.4826
    limit = max(k * mad, math.log1p(floor / 100))
    out.update(mad_pct=round((math.exp(mad) - 1) * 100, 3), threshold_pct=round((math.exp(limit) - 1) * 100, 3))
    if by_cpu:
        out["median_stretch"] = round(math.exp(med), 4)
    for s, v in judged:
        if math.log(v) - med > limit:  # one way only: a faster or less stretched probe is no disturbance
            out["flagged"].append({**s, "off_pct": round((v / math.exp(med) - 1) * 100, 2)})
    out["blocks_flagged"] = sorted({f["block"] for f in out["flagged"]})
    return out


def line(doc: dict | None) -> str | None:
    """One line for the run's output and report."""
    if not doc:
        return None
    if doc.get("why"):
        return f"drift canary: {doc['why']}"
    what = f"probe {doc['median_ms']:.1f} ms, wall/CPU {doc['median_stretch']:.3f}" if doc.get("median_stretch") else f"probe median {doc['median_ms']:.1f} ms"
    head = f"drift canary: {what} (robust spread {doc['mad_pct']:.1f} %, a block is flagged past {doc['threshold_pct']:.1f} %; {doc['overhead_ms_per_block']:.0f} ms a block)"
    if not doc["flagged"]:
        return head + "; no block flagged"
    worst = ", ".join(f"block {f['block']} before {f['engine']} {f['off_pct']:+.0f} %" for f in doc["flagged"])
    return head + f"; flagged: {worst}" + (f"; {doc['policy']}" if doc.get("policy") else "")


def discard(arms: list[dict], block: int, doc: dict) -> list[int]:
    """policy discard: when the canary flagged `block`, its rows leave the paired statistics (and
    so the stop rule, which then runs another block under --until-ci); they stay in the rows,
    marked.  arms' rows: PointRows.  Returns the blocks discarded so far."""
    if block in doc["blocks_flagged"]:
        why = "; ".join(f"drift canary {f['off_pct']:+.0f} % before {f['engine']}" for f in doc["flagged"] if f["block"] == block)
        for a in arms:
            for r in a["rows"]:
                if r.repeat == block:
                    r.put("discarded", why)
    return sorted({r.repeat for a in arms for r in a["rows"] if r.discarded})


def with_and_without(summary: dict, metrics: list[str], direction, threshold_pct: float = 2.0, confidence: float = 0.95) -> list[dict]:
    """Each engine x N x metric's paired interval over every block and without the blocks the
    canary flagged: [{engine, n, metric, all: (ratio, low, high, blocks), kept: (...)}]; [] when none was flagged."""

    flagged = set(((summary.get("canary") or {}).get("blocks_flagged")) or [])
    ref = summary.get("reference_engine")
    if not flagged or not ref:
        return []
    typed = [r for r in point_rows(summary.get("rows") or []) if r.valid]  # discarded too
    rows, gpus = [(r.engine, r.n, r.repeat, r.metrics) for r in typed], gpus_of(typed)
    pick = lambda p: (p.get("ratio"), p.get("low"), p.get("high"), p.get("n_blocks"))  # noqa: E731
    every = {(p["engine"], p["n"], p["metric"]): p
             for p in by_sample(rows, ref, metrics, direction, threshold_pct, confidence, gpus=gpus)}
    kept = {(p["engine"], p["n"], p["metric"]): p
            for p in by_sample([r for r in rows if r[2] not in flagged], ref, metrics, direction, threshold_pct,
                               confidence, gpus=gpus)}
    return [{"engine": k[0], "n": k[1], "metric": k[2], "all": pick(every[k]), "kept": pick(kept[k]) if k in kept else None} for k in every]
