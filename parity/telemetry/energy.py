"""Energy per token (issue 57): joules from the GPU's own energy counter over a serving point's
measured window, cross-checked against the integral of the power the sampler took in it.

The counter: NVML nvmlDeviceGetTotalEnergyConsumption (pynvml, in an NVML session opened by
parity.gpu.nvidia_smi), millijoules since the driver loaded, Volta or newer; read when the
window opens and when it closes (parity.telemetry.watch), on each GPU the engine uses, summed.
Which GPUs: CUDA_VISIBLE_DEVICES of the server process (/proc/<pid>/environ), else parity's own,
else every GPU NVML lists; `gpus_from` says which.  A number in it is an NVML index (PCI order:
CUDA's order with CUDA_DEVICE_ORDER=PCI_BUS_ID, and on identical GPUs), GPU-<uuid> is matched by
UUID prefix, and as in CUDA the list ends at the first entry that names no GPU.

The cross-check: each GPU's power integrated by the trapezoid rule over the same window, the first
and last samples held flat to its edges.  Counter and integral agree within TOLERANCE_PCT or the
point keeps the counter's number and a flag says by how much.  The power integrated, first found:
1. the power lane (parity.telemetry.sampler.PowerLane): NVML_FI_DEV_POWER_INSTANT alone, every
   serving.telemetry.power_interval_s (0.02 s), where it read every GPU with no gap over
   LANE_MAX_GAP lane intervals in the window.  On an H200 the field and the counter refresh about
   every 100 ms: read every 20 ms the integral met the counter within 0.75 % on every 2-5 s window,
   the same reads taken every 100 ms missed by up to 2.4 % (tests/data/telemetry/README.md).
   Both readings are stale by up to one refresh at each edge of the window, so the lane also
   gives the window's resolution (resolution_pct: refresh x the power at each edge / the
   counter): a difference past the tolerance but inside it is "not checkable" with that said,
   never a flag.  A 2 s serving window resolves +-8-11 %; about 10 s, 2 %;
2. else the sampler's samples (every serving.telemetry.interval_s): the instantaneous field where
   every sample of the GPUs has it, else nvmlDeviceGetPowerUsage, which on Ampere and newer is an
   average over the last POWER_AVERAGING_S: it lags a step in load by about half a second, so over
   a window shorter than that the averaged integral cannot check the counter (a real H200 point of
   0.55 s from idle read 44 % under it) and the check says "not checkable", without a flag; the
   counter's number stays.  One rule for every GPU (older ones' reading is closer to instantaneous).
`method` names the power and its interval, `power_from` which of the two and why not the lane.

Measure only: nothing here sets a power limit, a clock or a mode.

Not applicable, with the reason and never a 0: no NVML (no driver, nvidia-ml-py not installed,
PARITY_NO_NVML), a GPU without the counter, an engine on another host (NVML reads this machine),
telemetry off, a counter that did not move or went back (the driver reloaded).

read_capture() reads the point's own telemetry file (telemetry/<engine>-r<k>-n<N>.json), of
which it uses three keys, power_lane optional (files written before the lane have none and read as
before); any file of this shape is a capture:

    {"samples": [{"t": 0.0037, "gpus": [{"index": 0, "power_w": 493.503}, ...]}, ...],
     "power_lane": {"field": "NVML_FI_DEV_POWER_INSTANT", "interval_s": 0.02, "gpus": [0],
                    "samples": [[0.0061, 118.942], [0.0262, 860.45], ...], "note": null, ...},
     "energy": {"gpus": [0], "start": {"t": 0.0051, "mj": {"0": 81234567890}},
                             "end": {"t": 30.0102, "mj": {"0": 81245678901}}}}

t: seconds on the sampler's clock (since it started); power_w: watts (power_instant_w, where the
sampler read NVML's instantaneous field, beside it); power_lane.samples: [t, watts of each GPU in
power_lane.gpus' order], note: why there is no lane or why it stopped (errors:
{first, count}; thinned: times every other row was dropped past its bound); mj: the counter's
value in millijoules per NVML index (a string key, as JSON writes it)."""

from __future__ import annotations

import json
import math
import os
import time

from parity.gpu.nvidia_smi import open_nvml
from parity.metrics import energy as metrics
from parity.metrics.serving import prompt_tok_total
from parity.telemetry import procfs

TOLERANCE_PCT = 2.0
POWER_AVERAGING_S = 1.0  # NVML documents nvmlDeviceGetPowerUsage on Ampere and newer as a 1 s average
SOURCE = "NVML nvmlDeviceGetTotalEnergyConsumption (mJ since the driver loaded)"
CHECK = "trapezoid integral of the sampled power (nvmlDeviceGetPowerUsage), edges held flat"
CHECK_INSTANT = "trapezoid integral of the sampled instantaneous power (NVML_FI_DEV_POWER_INSTANT), edges held flat"
CHECK_LANE = ("trapezoid integral of the instantaneous power (NVML_FI_DEV_POWER_INSTANT) read alone "
              "every {interval:g} s by the power lane, edges held flat")
LANE_MAX_GAP = 5  # lane intervals (0.1 s at 0.02 s, the samples' spacing): a longer gap, the samples check instead
AVERAGED, INSTANT = "power_w", "power_instant_w"  # the sample's keys (parity.telemetry.nvml_gpu)


# ------------------------------------------------------------------ which GPUs


def select_gpus(visible: str | None, uuids: list[str]) -> tuple[list[int], str | None]:
    """(NVML indices, None) that CUDA_VISIBLE_DEVICES names among the GPUs NVML lists (their UUIDs
    in NVML order; None: every one), or ([], why) when it names none."""
    if visible is None:
        return list(range(len(uuids))), None
    out: list[int] = []
    for entry in (e.strip() for e in visible.split(",")):
        if entry.isdigit():
            hits = [int(entry)] if int(entry) < len(uuids) else []
        else:
            hits = [i for i, u in enumerate(uuids) if entry.startswith("GPU-") and u.startswith(entry)]
        if len(hits) != 1 or hits[0] in out:
            break  # CUDA ignores the rest of the list from here
        out.append(hits[0])
    if not out:
        return [], f"CUDA_VISIBLE_DEVICES={visible!r} names none of the {len(uuids)} GPU(s) NVML lists"
    return out, None


def visible_devices(server_pid: int | None, own: dict | None = None) -> tuple[str | None, str]:
    """(CUDA_VISIBLE_DEVICES the engine runs with or None, where that came from)."""
    own = os.environ if own is None else own
    env = procfs.environ(server_pid) if server_pid is not None else None
    if env is not None:
        v, where = env.get("CUDA_VISIBLE_DEVICES"), f"the server's (pid {server_pid})"
    else:
        v, where = own.get("CUDA_VISIBLE_DEVICES"), "parity's"
        if server_pid is not None:
            where += f" (the server's, pid {server_pid}, is not readable)"
    if v is None:
        return None, f"every GPU: {where} environment has no CUDA_VISIBLE_DEVICES"
    return v, f"{where} CUDA_VISIBLE_DEVICES={v}"


# ------------------------------------------------------------------ pure: integral and cross-check


def power_series(samples: list[dict], index: int, key: str = AVERAGED) -> list[tuple[float, float]]:
    """(t s, watts) of one GPU from the sampler's samples, in time order; samples without power skipped."""
    out = []
    for s in samples:
        for g in s.get("gpus") or []:
            t, w = s.get("t"), g.get(key)
            if g.get("index", 0) == index and _finite(t) and _finite(w):
                out.append((float(t), float(w)))
    return sorted(out)


def power_key(samples: list[dict], gpus: list[int]) -> str:
    """INSTANT where every sample of these GPUs has the instantaneous power, else AVERAGED."""
    seen = [g for s in samples for g in s.get("gpus") or [] if g.get("index", 0) in gpus]
    return INSTANT if seen and all(_finite(g.get(INSTANT)) for g in seen) else AVERAGED


def _at(pts: list[tuple[float, float]], x: float) -> float:
    """Power at x: linear between the points, the first and last held flat beyond them."""
    if x <= pts[0][0]:
        return pts[0][1]
    if x >= pts[-1][0]:
        return pts[-1][1]
    for (t0, w0), (t1, w1) in zip(pts, pts[1:]):
        if t0 <= x <= t1:
            return w0 if t1 == t0 else w0 + (w1 - w0) * (x - t0) / (t1 - t0)
    raise AssertionError("unreachable: x lies inside the points")


def integral_j(pts: list[tuple[float, float]], start: float, end: float) -> float | None:
    """Joules over [start, end] by the trapezoid rule on (t s, watts) points in time order; None
    without a point or a window."""
    if not pts or not end > start:
        return None
    knots = [(start, _at(pts, start)), *[p for p in pts if start < p[0] < end], (end, _at(pts, end))]
    return sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in zip(knots, knots[1:]))


def lane_series(lane, gpus: list[int], lo: float, hi: float) -> tuple[dict[int, list] | None, str | None]:
    """({index: (t s, watts) points}, None) from the power lane where it read every GPU over [lo, hi]
    with no gap (edges included) over LANE_MAX_GAP of its intervals, else (None, why not)."""
    if not isinstance(lane, dict):
        return None, "no power lane in this capture"
    rows, cols, step = lane.get("samples") or [], lane.get("gpus") or [], lane.get("interval_s")
    if not rows or not _finite(step) or step <= 0:
        return None, f"no power lane ({lane.get('note') or 'no samples'})"
    out = {}
    for i in gpus:
        if i not in cols:
            return None, f"the power lane did not read GPU {i}"
        c = cols.index(i) + 1
        pts = sorted((float(r[0]), float(r[c])) for r in rows
                     if isinstance(r, list) and len(r) > c and _finite(r[0]) and _finite(r[c]))
        knots = [lo, *(t for t, _ in pts if lo < t < hi), hi]
        gap = max(b - a for a, b in zip(knots, knots[1:])) if pts else None
        if gap is None or gap > LANE_MAX_GAP * step:
            why = "no sample" if gap is None else f"a {gap:.3f} s gap (over {LANE_MAX_GAP} x {step:g} s)"
            note = f" ({lane['note']})" if lane.get("note") else ""
            return None, f"the power lane has {why} on GPU {i} in the window{note}"
        out[i] = pts
    return out, None


def refresh_s(pts: list[tuple[float, float]]) -> float | None:
    """How often the power reading changes (the median time between changes of its value) in
    points read faster than it refreshes (the lane); None under three changes, or where the
    median change comes within 1.5 reads (read every refresh or slower, each read is a new
    value: that median is the reads' interval, not the refresh)."""
    changes = [t1 for (_, w0), (t1, w1) in zip(pts, pts[1:]) if w1 != w0]
    if len(changes) < 3:
        return None
    gaps = sorted(b - a for a, b in zip(changes, changes[1:]))
    reads = sorted(b - a for (a, _), (b, _) in zip(pts, pts[1:]))
    gap = gaps[len(gaps) // 2]
    return gap if gap >= 1.5 * reads[len(reads) // 2] else None


def resolution(per_edge: list[tuple[float, float, float]], counter_j: float) -> float | None:
    """The +-% to which a window's counter and power integral can be compared at all: each of them
    is read stale by up to one refresh at each edge, so each edge can move by refresh x the power
    there; per_edge: (refresh s, watts at the start, watts at the end) per GPU.  None: a refresh
    unknown."""
    if not per_edge or any(r is None for r, _, _ in per_edge) or not counter_j > 0:
        return None
    return 100 * sum(r * (a + b) for r, a, b in per_edge) / counter_j


def cross_check(counter_j: float, integral: float | None, tolerance_pct: float = TOLERANCE_PCT,
                window_s: float | None = None, averaged_over_s: float = 0.0,
                resolution_pct: float | None = None) -> dict:
    """The power integral against the counter: diff_pct = (integral - counter) / counter x 100;
    agree within tolerance_pct; check says the outcome in words.  A window shorter than the power
    reading averages over (averaged_over_s) is not checkable: agree None, the difference kept.  So
    is a difference past the tolerance that the window cannot resolve (resolution_pct: both
    readings refresh every ~0.1 s on an H200, which on a 2 s serving window is +-8-11 %)."""
    if integral is None:
        return {"diff_pct": None, "agree": None, "check": "not cross-checked: a GPU has no power sample (per_gpu)"}
    diff = 100 * (integral - counter_j) / counter_j
    if window_s is not None and window_s < averaged_over_s:
        check = f"not checkable: the window ({window_s:.2f} s) is shorter than the {averaged_over_s:g} s the power "
        check += f"reading averages over (counter {counter_j:.3f} J, power integral {integral:.3f} J: {diff:+.2f} %)"
        return {"diff_pct": round(diff, 3), "agree": None, "check": check}
    if resolution_pct is not None and tolerance_pct < abs(diff) <= resolution_pct:
        check = f"not checkable to {tolerance_pct:g} %: counter {counter_j:.3f} J vs power integral {integral:.3f} J: "
        check += f"{diff:+.2f} %, inside the +-{resolution_pct:.1f} % this window resolves (the counter and the power "
        check += "refresh about every 0.1 s: each edge of the window can move by that much of its power; "
        check += "a longer window resolves more)"
        return {"diff_pct": round(diff, 3), "agree": None, "check": check}
    agree = abs(diff) <= tolerance_pct
    words = "agree" if agree else "DISAGREE"
    check = f"counter {counter_j:.3f} J vs power integral {integral:.3f} J: {diff:+.2f} % "
    check += f"({words}, tolerance {tolerance_pct:g} %)"
    return {"diff_pct": round(diff, 3), "agree": agree, "check": check}


def measure(start: dict, end: dict, samples: list[dict], gpus: list[int], tolerance_pct: float = TOLERANCE_PCT,
            lane: dict | None = None) -> dict:
    """The point's energy from the counter's two reads ({"t": s, "mj": {index: mJ}}), the power lane
    (the file's power_lane; None: none) and the sampler's samples: counter_j summed over gpus, the
    power integral, their cross-check, per GPU; {"applicable": False, "why"} where the counter gives no number."""
    lo, hi = start["t"], end["t"]
    fast, no_lane = lane_series(lane, gpus, lo, hi)
    key = INSTANT if fast else power_key(samples, gpus)
    counter, integ, per, edges = 0.0, 0.0, [], []
    for i in gpus:
        a, b = _mj(start, i), _mj(end, i)
        if a is None or b is None:
            return not_applicable(f"GPU {i}: no energy counter read at the window's {'start' if a is None else 'end'}")
        if b < a:
            return not_applicable(f"GPU {i}: the energy counter went back ({a} -> {b} mJ): the driver reloaded")
        if b == a:
            return not_applicable(f"GPU {i}: the energy counter did not move in {hi - lo:.3f} s")
        pts = fast[i] if fast else power_series(samples, i, key)
        j = integral_j(pts, lo, hi)
        counter += (b - a) / 1000
        integ = None if integ is None or j is None else integ + j
        if fast:
            edges.append((refresh_s(pts), _at(pts, lo), _at(pts, hi)))
        per.append({"index": i, "counter_j": round((b - a) / 1000, 3), "integral_j": None if j is None else round(j, 3),
                    "power_samples": sum(lo <= t <= hi for t, _ in pts)})  # fmt: skip
    if not per:
        return not_applicable("no GPU to read")
    res = resolution(edges, counter) if fast else None
    doc = {"applicable": True, "why": None, "source": SOURCE, "gpus": list(gpus), "window_s": round(hi - lo, 4),
           "counter_j": round(counter, 3), "integral_j": None if integ is None else round(integ, 3),
           **cross_check(counter, integ, tolerance_pct, hi - lo, POWER_AVERAGING_S if key == AVERAGED else 0.0, res),
           "tolerance_pct": tolerance_pct, "resolution_pct": None if res is None else round(res, 2),
           "method": _method(key, fast, lane), "per_gpu": per,
           "power_from": f"the power lane (every {lane['interval_s']:g} s)" if fast else f"the samples: {no_lane}"}
    # a flag where they disagree or a GPU has no power; a window too short for the averaged power is said, not flagged
    doc["flag"] = f"energy {doc['check']}" if doc["agree"] is False or doc["integral_j"] is None else None
    return doc


def _method(key: str, fast, lane) -> str:
    if fast:
        return CHECK_LANE.format(interval=lane["interval_s"])
    return CHECK if key == AVERAGED else CHECK_INSTANT


def not_applicable(why: str) -> dict:
    return {"applicable": False, "why": why if why.startswith("not applicable") else f"not applicable: {why}"}


def _mj(read: dict, index: int) -> int | None:
    mj = read.get("mj") or {}
    v = mj.get(index, mj.get(str(index)))
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


# ------------------------------------------------------------------ the point's row


def of_point(meter: Window | None, sampler, error: str | None, lane: dict | None = None) -> dict:
    """The point's energy document (its telemetry file keeps it whole, and the power lane's doc, lane,
    beside it); never raises."""
    if meter is None:
        return not_applicable(error or "no telemetry around the point")
    try:
        return meter.result(sampler.samples if sampler is not None else [], lane)
    except Exception as e:
        return not_applicable(f"the energy figures failed: {e!r}")


def on_row(row: dict, doc: dict, recs) -> None:
    """The energy metrics (parity.metrics.energy) over every request of the point, the reason where
    there is none, the short energy block, and the cross-check's flag."""
    joules = doc.get("counter_j") if doc.get("applicable") else None
    sample = metrics.EnergySample(joules, doc.get("why"), sum(r.tokens for r in recs), prompt_tok_total(recs))
    values, why = metrics.compute(sample)
    row.update(values)
    row.setdefault("why", {}).update(why)
    keys = ("applicable", "why", "gpus", "gpus_from", "window_s", "counter_j", "integral_j", "diff_pct", "agree",
            "check", "resolution_pct", "power_from")
    tokens = {"output_tokens": sample.output_tokens, "prompt_tokens": sample.prompt_tokens}
    row["energy"] = {k: doc[k] for k in keys if k in doc} | tokens
    if doc.get("flag"):
        row.setdefault("flags", []).append(doc["flag"])


# ------------------------------------------------------------------ the thin NVML reader


class Meter:
    """The energy counter of some GPUs (NVML indices) in one NVML session: read() -> {index: mJ}."""

    def __init__(self, nv, indices: list[int]):
        self.nv, self.indices = nv, indices
        self.handles = {i: nv.nvmlDeviceGetHandleByIndex(i) for i in indices}

    def read(self) -> dict[int, int]:
        get = self.nv.nvmlDeviceGetTotalEnergyConsumption  # millijoules since the driver loaded
        return {i: int(get(h)) for i, h in self.handles.items()}

    def close(self) -> None:
        _shutdown(self.nv)


def uuids(nv) -> list[str]:
    """Every GPU's UUID in NVML order ("GPU-8a3f...")."""
    out = []
    for i in range(nv.nvmlDeviceGetCount()):
        u = nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(i))
        out.append(u.decode() if isinstance(u, bytes) else str(u))
    return out


class Window:
    """The counter's two reads around a point's measured window, times on the sampler's clock
    (t0).  Never raises: what it cannot read becomes the point's reason."""

    def __init__(self, meter: Meter | None, why: str | None, t0: float, gpus_from: str | None = None):
        self.meter, self.why, self.t0, self.gpus_from = meter, why, t0, gpus_from
        self.start: dict | None = None
        self.end: dict | None = None

    @classmethod
    def open(cls, server_pid: int | None, host: str, t0: float, nvml=open_nvml) -> Window:
        """Open NVML and take the start read (host: the runner's; "local" is this machine)."""
        if host != "local":
            return cls(None, f"the engine runs on {host} and NVML reads this machine's GPUs only", t0)
        nv, note = nvml()
        if nv is None:
            return cls(None, f"no energy counter here ({note})", t0)
        try:
            visible, whence = visible_devices(server_pid)
            gpus, why = select_gpus(visible, uuids(nv))
            if why:
                _shutdown(nv)
                return cls(None, why, t0, whence)
            w = cls(Meter(nv, gpus), None, t0, whence)
            w.start = w.read()
            return w
        except Exception as e:  # NVMLError_NotSupported: a GPU older than Volta
            _shutdown(nv)
            return cls(None, f"the GPU's energy counter does not answer (NVML: {e})", t0)

    def read(self) -> dict:
        return {"t": round(time.monotonic() - self.t0, 4), "mj": self.meter.read()}

    def stop(self) -> None:
        """The end read, then the NVML session ends."""
        if self.meter is None:
            return
        try:
            self.end = self.read()
        except Exception as e:
            self.why = f"the energy counter did not answer at the window's end (NVML: {e})"
        finally:
            self.meter.close()

    def gpus(self) -> list[int]:
        """The NVML indices whose counter this window reads ([]: none, why says why)."""
        return list(self.meter.indices) if self.meter is not None and not self.why else []

    def result(self, samples: list[dict], lane: dict | None = None) -> dict:
        """measure() over the two reads (the point's file keeps the reads: a capture, read_capture)."""
        if self.meter is None or self.start is None or self.end is None or self.why:
            return {**not_applicable(self.why or "the energy counter was not read"), "gpus_from": self.gpus_from}
        doc = measure(self.start, self.end, samples, self.meter.indices, lane=lane)
        return {**doc, "gpus_from": self.gpus_from, "start": self.start, "end": self.end}


def _shutdown(nv) -> None:
    try:
        nv.nvmlShutdown()
    except Exception:
        pass


# ------------------------------------------------------------------ captures


def read_capture(path) -> dict:
    """A captured point (the module's docstring: its telemetry file) -> {"start", "end", "gpus",
    "samples", "lane", "recorded"}: measure(start, end, samples, gpus, lane=lane) recomputes what the
    point recorded (lane None: a file without the power lane).  ValueError names what is missing."""
    with open(path) as f:
        doc = json.load(f)
    e = doc.get("energy") if isinstance(doc, dict) else None
    if not isinstance(e, dict) or not all(isinstance(e.get(k), dict) for k in ("start", "end")):
        raise ValueError(f"{path}: no energy.start / energy.end counter reads")
    for k in ("start", "end"):
        if not _finite(e[k].get("t")) or not isinstance(e[k].get("mj"), dict):
            raise ValueError(f"{path}: energy.{k} needs t (s) and mj ({{index: millijoules}})")
    gpus = e.get("gpus") or sorted(e["start"]["mj"], key=int)
    if not isinstance(doc.get("samples"), list):
        raise ValueError(f"{path}: no samples list")
    gpus = [int(i) for i in gpus]
    lane = doc.get("power_lane")
    if lane is not None and not isinstance(lane, dict):
        raise ValueError(f"{path}: power_lane is not an object")
    return {"start": e["start"], "end": e["end"], "gpus": gpus, "samples": doc["samples"], "lane": lane, "recorded": e}
