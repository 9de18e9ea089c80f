"""Memory per engine: device memory used at the arm's start, when its server is ready, at
the end of each point and at the arm's end, as the device total (parity.gpu.memory.used_mib:
NVML, else /proc/meminfo, which on unified memory such as the GB10 is the GPU's) and as the
server's own process tree (NVML per-process compute memory on a discrete GPU; on a CPU box
the tree's resident memory, /proc/PID/status VmRSS).  A few samples per arm, not a sampler
(a 10 Hz NVML sampler is parity.telemetry's job): peak = the largest sample, steady = the
median of the point-end samples."""

from __future__ import annotations

import os
import statistics
from parity.gpu.memory import used_mib
from parity.gpu.nvidia_smi import nvml_call



def pid_tree(pid: int) -> list[int]:
    """pid and its descendants (from /proc/*/stat parent pids)."""
    parent: dict[int, list[int]] = {}
    try:
        names = [n for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return [pid]
    for n in names:
        try:
            with open(f"/proc/{n}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        parent.setdefault(ppid, []).append(int(n))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += parent.get(p, [])
    return out


def rss_mib(pids: list[int]) -> int | None:
    total, seen = 0, False
    for p in pids:
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                        seen = True
                        break
        except (OSError, ValueError):
            continue
    return total // 1024 if seen else None


def nvml_process_mib(pids: list[int]) -> int | None:
    """Compute memory NVML attributes to these pids, summed over the GPUs (None: NVML cannot say)."""

    want = set(pids)

    def query(nv):
        total, seen = 0, False
        for i in range(nv.nvmlDeviceGetCount()):
            for p in nv.nvmlDeviceGetComputeRunningProcesses(nv.nvmlDeviceGetHandleByIndex(i)):
                if p.pid in want and p.usedGpuMemory is not None:
                    total += p.usedGpuMemory
                    seen = True
        return total // (1 << 20) if seen else None

    value, _ = nvml_call(query)
    return value


NOT_A_PROCESS = "not applicable: the server is not a process parity started (memory per process does not apply)"


class Track:
    def __init__(self, before: int | None, source: str, proc=None, note: str | None = None, gpu: int | None = None):
        self.before, self.source, self.gpu = before, source, gpu  # gpu: a crossover arm's GPU (its memory alone)
        self.pid = getattr(proc, "pid", None)
        self.note = note  # what its kind says of its figures (vLLM: a reservation)
        self.samples: list[dict] = []

    def sample(self, label: str) -> dict:
        used, src = used_mib(self.gpu)
        s = {"at": label, "used_mib": used}
        if self.pid is not None:
            pids = pid_tree(self.pid)
            proc = nvml_process_mib(pids) if src == "nvml" else None
            s["process_mib"], s["process_source"] = (proc, "nvml per-process") if proc is not None else (rss_mib(pids), "VmRSS of the server's process tree")
        self.samples.append(s)
        return s

    def result(self) -> dict:
        self.sample("end")
        used = [s["used_mib"] for s in self.samples if s["used_mib"] is not None]
        points = [s for s in self.samples if s["at"] not in ("ready", "end")] or self.samples
        steady = [s["used_mib"] for s in points if s["used_mib"] is not None]
        proc = [s.get("process_mib") for s in self.samples if s.get("process_mib") is not None]
        proc_steady = [s.get("process_mib") for s in points if s.get("process_mib") is not None]
        out = {
            "before": self.before,
            "peak": max(used) if used else None,
            "steady": round(statistics.median(steady)) if steady else None,
            "source": self.source,
            "process_peak": max(proc) if proc else None,
            "process_steady": round(statistics.median(proc_steady)) if proc_steady else None,
            "process_source": next((s.get("process_source") for s in self.samples if s.get("process_mib") is not None), None),
            "samples": self.samples,
        }
        if self.note:
            out["note"] = self.note
        if self.pid is None:
            out["process_source"] = NOT_A_PROCESS
            out["not_applicable"] = True
        return out


def start(before: int | None, source: str, proc=None, note: str | None = None, gpu: int | None = None) -> Track:
    t = Track(before, source, proc, note, gpu)
    t.sample("ready")
    return t


def summary(arms: list[dict], reference: str | None) -> dict | None:
    """Per engine: the median over its arms of peak and steady memory (the server's process
    tree where every arm of a started server has it, else the device total above `before`), and
    engine/reference.  A server parity did not start (an endpoint) has no process: not applicable."""
    per: dict[str, list[dict]] = {}
    for a in arms:
        if isinstance(a.get("memory"), dict):
            per.setdefault(a["engine"], []).append(a["memory"])
    if not per:
        return None
    na = {e for e, ms in per.items() if all(m.get("not_applicable") for m in ms)}
    use_proc = all(m.get("process_peak") is not None for e, ms in per.items() if e not in na for m in ms)
    engines = {}
    for e, ms in per.items():
        if e in na:
            engines[e] = {"peak_mib": None, "steady_mib": None, "before_mib": ms[0].get("before"), "arms": len(ms), "source": NOT_A_PROCESS, "not_applicable": True}
            continue
        if use_proc:
            peak, steady = [m["process_peak"] for m in ms], [m["process_steady"] for m in ms if m.get("process_steady") is not None]
        else:
            ok = [m for m in ms if m.get("peak") is not None and m.get("before") is not None]
            peak, steady = [m["peak"] - m["before"] for m in ok], [m["steady"] - m["before"] for m in ok if m.get("steady") is not None]
        engines[e] = {"peak_mib": round(statistics.median(peak)) if peak else None, "steady_mib": round(statistics.median(steady)) if steady else None,
                      "before_mib": ms[0].get("before"), "arms": len(ms),
                      "source": ms[0].get("process_source") if use_proc else f"device total above the arm's start ({ms[0].get('source')})",
                      **({"note": ms[0]["note"]} if ms[0].get("note") else {})}  # fmt: skip
    ratios = []
    ref = engines.get(reference or "")
    for e, m in engines.items():
        if ref is None or e == reference:
            continue
        if e in na or reference in na:
            ratios.append({"engine": e, "reference": reference, "peak": None, "steady": None, "why": f"not applicable: {e if e in na else reference} is not a process parity started"})
            continue
        r = lambda k: round(m[k] / ref[k], 4) if m.get(k) and ref.get(k) else None  # noqa: E731
        ratios.append({"engine": e, "reference": reference, "peak": r("peak_mib"), "steady": r("steady_mib")})
    basis = "not applicable" if len(na) == len(per) else "process tree" if use_proc else "device total delta"
    return {"engines": engines, "ratios": ratios, "basis": basis}
