"""The report's Telemetry section and plot inputs: read from summary.json rows
(row["telemetry"], row["engine_timing"]); nothing is computed here but medians over repeats."""

from __future__ import annotations

import math
import statistics

from parity.report.rundata import RunData
from parity.report.sections import fmt
from parity.telemetry.engine_timing import DEFINITIONS
from parity.metrics.registry import direction
from parity.stats.canary import line, with_and_without


def _med(vals):
    v = [x for x in vals if isinstance(x, (int, float))]
    return statistics.median(v) if v else None


def _max(vals):
    v = [x for x in vals if isinstance(x, (int, float))]
    return max(v) if v else None


def telemetry_section(rd: RunData) -> dict | None:
    """Per engine x N (over repeats): SM clock and power medians, max temperature, throttle events,
    foreign processes, host load max, client and server CPU %; the engine-clock figures beside the client's."""

    s = rd.summary or {}
    rows = [r for r in rd.rows() if isinstance(r.telemetry, dict)]
    if not rows:
        return None
    cells: dict = {}
    for r in rows:
        cells.setdefault((r.engine, r.n), []).append(r)
    table, timing = [], []
    for (eng, n), rs in sorted(cells.items(), key=lambda kv: (str(kv[0][0]), kv[0][1] if isinstance(kv[0][1], (int, float)) else 0)):
        t = [r.telemetry for r in rs]
        throttle: dict = {}
        for x in t:
            for k, v in (x.get("throttle") or {}).items():
                throttle[k] = throttle.get(k, 0) + v
        foreign = sorted({p for x in t for p in x.get("foreign_pids") or []})
        table.append([eng, n, len(rs), fmt(_med(x.get("sm_mhz_median") for x in t)), fmt(_med(x.get("power_w_median") for x in t)), fmt(_max(x.get("temp_c_max") for x in t)),
                      ", ".join(f"{k} x{v}" for k, v in sorted(throttle.items())) or "none", ", ".join(map(str, foreign)) or "none", fmt(_max(x.get("load1_max") for x in t)),
                      fmt(_med(x.get("client_cpu_pct") for x in t)), fmt(_med(x.get("server_cpu_pct") for x in t))])  # fmt: skip
        et = [r.info.get("engine_timing") or {} for r in rs]
        timing.append([eng, n] + [fmt(_med(e.get(k) for e in et)) for k in ("engine_decode_tps_mean", "engine_perseq_tps_mean", "engine_decode_ms_mean", "client_decode_ms_mean", "decode_overhead_ms_mean", "engine_e2e_ms_mean", "client_e2e_ms_mean", "client_overhead_ms_mean")])
    gpu = any(r.telemetry.get("gpu") for r in rows)
    notes = sorted({r.telemetry.get("gpu_note") for r in rows if r.telemetry.get("gpu_note")})
    affinity = sorted({_aff(a.get("affinity")) for a in s.get("arms") or [] if a.get("affinity")})
    return {"rows": table, "timing": timing, "gpu": gpu, "note": None if gpu else ("no GPU telemetry in this run: " + "; ".join(notes) if notes else "no GPU telemetry in this run"),
            "affinity": affinity, "definitions": [[k, u, f] for k, (u, f) in DEFINITIONS.items()]}  # fmt: skip


def _aff(a: dict) -> str:
    if a.get("applied"):
        return f"server cores {a.get('server_cpus')}, client cores {a.get('client_cpus')} (of {a.get('cpus')})"
    return a.get("why") or "not applied"


def plot_points(rd: RunData) -> list[dict]:
    """Per valid-or-not point with GPU telemetry: engine, n, repeat, decode_agg_tps, SM clock and power medians."""
    out = []
    for r in rd.rows():
        t = r.telemetry or {}
        if t.get("gpu") and (t.get("sm_mhz_median") is not None or t.get("power_w_median") is not None):
            out.append({"engine": r.engine, "n": r.n, "repeat": r.repeat, "decode_agg_tps": r.metric("decode_agg_tps"),
                        "sm_mhz": t.get("sm_mhz_median"), "power_w": t.get("power_w_median")})
    return out


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _block(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


CANARY_ENTRY = {"block": _block, "engine": lambda v: isinstance(v, str), "ms": _number, "off_pct": _number,
                "cpu_ms": lambda v: v is None or _number(v)}
CANARY_FIGURES = ("median_ms", "mad_pct", "threshold_pct", "overhead_ms_per_block")


def canary_problem(summary: dict) -> str | None:
    """Why summary.json's "canary" (parity.stats.canary.assess) cannot be reported, or None: checked
    before the report writes anything, so a crafted or damaged entry is one line, not a half report."""
    c = summary.get("canary")
    if c is None:
        return None
    if not isinstance(c, dict):
        return f"canary is {_show(c)}, not an object"
    if c.get("why") is not None and not isinstance(c["why"], str):
        return f"canary.why is {_show(c['why'])}, not text"
    flagged = c.get("flagged", [] if c.get("why") else None)
    if not isinstance(flagged, list):
        return f"canary.flagged is {_show(flagged) if 'flagged' in c else 'absent'}, not a list"
    for i, f in enumerate(flagged):
        if not isinstance(f, dict):
            return f"canary.flagged[{i}] is {_show(f)}, not an entry {{block, engine, ms, off_pct}}"
        bad = next((k for k, ok in CANARY_ENTRY.items() if not ok(f.get(k))), None)
        if bad:
            return f"canary.flagged[{i}].{bad} is {_show(f[bad]) if bad in f else 'absent'}"
    blocks = c.get("blocks_flagged") or []
    if not isinstance(blocks, list) or not all(map(_block, blocks)):
        return f"canary.blocks_flagged is {_show(blocks)}, not a list of block numbers"
    if not c.get("why"):  # judged: its line shows these figures
        bad = next((k for k in CANARY_FIGURES if not _number(c.get(k))), None)
        if bad is None and c.get("median_stretch") is not None and not _number(c["median_stretch"]):
            bad = "median_stretch"
        if bad:
            return f"canary.{bad} is {_show(c[bad]) if bad in c else 'absent'}, not a number"
    if c.get("policy") is not None and not isinstance(c["policy"], str):
        return f"canary.policy is {_show(c['policy'])}, not text"
    return None


def _show(v) -> str:
    return "null" if v is None else repr(v)[:40]


def canary_section(rd: RunData, metrics=("decode_agg_tps", "agg_tps", "ttft_mean_ms")) -> dict | None:
    """The drift canary (summary.json "canary", parity.stats.canary): its line, each flagged block
    with the telemetry of that block's points beside it (host load, client and server CPU %), and
    the paired intervals with and without the flagged blocks."""

    c = (rd.summary or {}).get("canary")
    if not isinstance(c, dict):
        return None
    rows, points = [], rd.rows()
    for f in c.get("flagged") or []:
        rs = [r for r in points if r.repeat == f["block"] and r.engine == f["engine"]]
        t = [r.telemetry for r in rs if isinstance(r.telemetry, dict)]
        probe = fmt(f["ms"]) if f.get("cpu_ms") is None else f"{fmt(f['ms'])} / {fmt(f['cpu_ms'])}"
        rows.append([f["block"], f["engine"], probe, f"{f['off_pct']:+.1f}%", fmt(_max(x.get("load1_max") for x in t)), fmt(_med(x.get("client_cpu_pct") for x in t)),
                     fmt(_med(x.get("server_cpu_pct") for x in t)), "discarded" if any(r.discarded for r in rs) else "flagged"])  # fmt: skip
    def iv(t):
        return "-" if not t or t[0] is None else f"{t[0]:.4f} [{fmt(t[1])}, {fmt(t[2])}] ({t[3]})"

    both = [[w["engine"], w["n"], w["metric"], iv(w["all"]), iv(w["kept"])] for w in with_and_without(rd.summary or {}, list(metrics), direction)]
    return {"line": line(c), "method": c.get("method"), "rows": rows, "intervals": both}
