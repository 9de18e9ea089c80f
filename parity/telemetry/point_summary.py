"""A point's telemetry summary (per metric min/median/max, throttle reasons seen, foreign
compute processes, host load, CPU time) and its verdict: a foreign compute process makes
the point invalid; a clock slowdown (any reason but GpuIdle / ApplicationsClocksSetting)
flags it.  Pure functions over the sampler's plain data."""

from __future__ import annotations

import os
import statistics

from parity.gpu import throttle
from parity.gpu.nvidia_smi import process_name

GPU_METRICS = ("sm_mhz", "mem_mhz", "power_w", "temp_c", "util_gpu_pct", "util_mem_pct", "mem_used_mib")


def spread(values) -> dict | None:
    v = [x for x in values if isinstance(x, (int, float))]
    if not v:
        return None
    return {"min": min(v), "median": round(statistics.median(v), 3), "max": max(v)}


def summarize(samples: list[dict], gpu_source: str | None, gpu_note: str, cpu: dict, server_tree: set[int] | None, unsupported: dict | None = None,
              errors: dict | None = None, self_pid: int | None = None, visible=None) -> dict:
    """samples: [{t, load1, server_pids, gpus: [{index, sm_mhz, ..., reasons, pids}]}]; server_tree: every pid
    of the engine's server seen during the point (None: not known, foreign processes are not judged)."""
    visible = visible or (lambda pid: os.path.exists(f"/proc/{pid}"))
    gpu_rows = [g for s in samples for g in s.get("gpus") or []]
    per_gpu = []
    for idx in sorted({g.get("index", 0) for g in gpu_rows}):
        rows = [g for g in gpu_rows if g.get("index", 0) == idx]
        per_gpu.append({"index": idx, "samples": len(rows), **{m: spread(g.get(m) for g in rows) for m in GPU_METRICS}})
    reasons: dict[str, int] = {}
    for g in gpu_rows:
        for name in g.get("reasons") or []:
            reasons[name] = reasons.get(name, 0) + 1
    compute = sorted({p for g in gpu_rows for p in g.get("pids") or []})
    foreign, note = None, None
    if server_tree is not None and gpu_rows:
        mine = set(server_tree) | ({self_pid} if self_pid else set())
        others = [p for p in compute if p not in mine]
        if others and not (set(compute) & mine) and not any(visible(p) for p in others):
            note = f"compute pids {others} are not in this pid namespace and the server's are not among them: not attributed"
            others = []
        foreign = others
    load = [s["load1"] for s in samples if isinstance(s.get("load1"), (int, float))]
    return {
        "samples": len(samples),
        "gpu": {"source": gpu_source if gpu_rows else None, "note": gpu_note if not gpu_rows else None, "per_gpu": per_gpu, "unsupported": unsupported or {}},
        "throttle_reasons": reasons,  # samples (x GPUs) in which each reason was active
        "slowdowns": {k: v for k, v in reasons.items() if k not in throttle.BENIGN},
        "compute_pids": compute,
        "foreign_pids": foreign,
        "foreign_names": {p: _comm(p) for p in foreign or []},
        "attribution_note": note,
        "host": {"load1": spread(load)},
        "cpu": cpu,
        "errors": errors or {},
    }


def _comm(pid: int) -> str:
    return process_name(pid)


def verdict(summary: dict) -> tuple[list[str], list[str]]:
    """(problems that make the point invalid, flags that only mark it)."""
    problems, flags = [], []
    foreign = summary.get("foreign_pids") or []
    if foreign:
        names = summary.get("foreign_names") or {}
        who = ", ".join(f"pid {p}" + (f" ({names.get(p) or names.get(str(p))})" if names.get(p) or names.get(str(p)) else "") for p in foreign)
        problems.append(f"another compute process ran on the GPU during the point: {who}")
    slow = summary.get("slowdowns") or {}
    if slow:
        n = summary.get("samples") or 0
        flags.append("GPU clocks slowed: " + ", ".join(f"{k} in {v}/{n} samples" for k, v in sorted(slow.items())))
    return problems, flags


def short(summary: dict, path: str) -> dict:
    """What the row (and summary.json) carries: medians of the first GPU, the verdict's inputs, CPU use."""
    g = (summary.get("gpu") or {}).get("per_gpu") or []
    first = g[0] if g else {}
    med = lambda m, k="median": (first.get(m) or {}).get(k)  # noqa: E731
    cpu = summary.get("cpu") or {}
    load = (summary.get("host") or {}).get("load1") or {}
    return {
        "file": path,
        "samples": summary.get("samples"),
        "gpu": (summary.get("gpu") or {}).get("source"),
        "gpu_note": (summary.get("gpu") or {}).get("note"),
        "gpu_index": first.get("index"),  # the GPU the medians are of (a crossover arm samples its own alone)
        "sm_mhz_median": med("sm_mhz"),
        "mem_mhz_median": med("mem_mhz"),
        "power_w_median": med("power_w"),
        "temp_c_max": med("temp_c", "max"),
        "throttle": summary.get("slowdowns") or {},
        "foreign_pids": summary.get("foreign_pids"),
        "load1_min": load.get("min"),
        "load1_max": load.get("max"),
        **{k: cpu.get(k) for k in ("client_cpu_s", "client_cpu_pct", "server_cpu_s", "server_cpu_pct")},
        "errors": sorted(summary.get("errors") or {}),
    }
