"""Device memory in use, and waiting for it to come back after an engine stops.

The users' harness sleeps 3-5 s after stopping each arm: on the GB10's unified
memory a new server can start before the old one's memory returns.  parity waits
on the number itself: NVML's used memory summed over the GPUs where NVML reports
it, else the system's used memory (MemTotal - MemAvailable from /proc/meminfo),
which on unified memory is the GPU's memory too.  At least serving.settle_s,
at most serving.settle_timeout_s; not getting back within the tolerance by then is
an error that says how far it stayed."""

from __future__ import annotations

import time
from pathlib import Path

from parity.errors import InfraError
from parity.gpu.nvidia_smi import nvml_call


def nvml_used_mib(gpu: int | None = None) -> int | None:
    """Used memory summed over every GPU, or of NVML index `gpu` alone (a crossover arm's)."""

    def query(nv):
        total = 0
        for i in range(nv.nvmlDeviceGetCount()) if gpu is None else [gpu]:
            total += nv.nvmlDeviceGetMemoryInfo(nv.nvmlDeviceGetHandleByIndex(i)).used
        return total // (1 << 20)

    value, _ = nvml_call(query)  # GB10 answers "Not Supported": None, and /proc/meminfo takes over
    return value


def parse_meminfo_used_mib(text: str) -> int | None:
    kb = {}
    for line in text.splitlines():
        k, _, v = line.partition(":")
        if k in ("MemTotal", "MemAvailable"):
            kb[k] = int(v.split()[0])
    if len(kb) < 2:
        return None
    return (kb["MemTotal"] - kb["MemAvailable"]) // 1024


def used_mib(gpu: int | None = None) -> tuple[int | None, str]:
    """(MiB, source); gpu: that GPU's alone where NVML answers (meminfo is the host's either way)."""
    v = nvml_used_mib(gpu)
    if v is not None:
        return v, "nvml"
    try:
        return parse_meminfo_used_mib(Path("/proc/meminfo").read_text()), "meminfo"
    except OSError:
        return None, "none"


def wait_back(before: int | None, source: str, settle_s: float, timeout_s: float, tolerance_mib: int, what: str = "the engine") -> dict:
    """Sleep settle_s, then poll until used memory is within tolerance of `before` (bounded)."""
    t0 = time.monotonic()
    time.sleep(settle_s)
    if before is None:
        return {"source": source, "before_mib": None, "after_mib": None, "waited_s": round(time.monotonic() - t0, 2), "note": f"no memory reading ({source}): slept serving.settle_s"}
    now = before
    while True:
        now, src = used_mib()
        if now is None or src != source or now <= before + tolerance_mib:
            break
        if time.monotonic() - t0 >= timeout_s:
            raise InfraError(
                f"memory did not come back after stopping {what}: {now} MiB used ({source}), {before} MiB before it started, "
                f"tolerance {tolerance_mib} MiB, waited {time.monotonic() - t0:.0f} s (serving.settle_timeout_s); is it still running?"
            )
        time.sleep(0.5)
    return {"source": source, "before_mib": before, "after_mib": now, "waited_s": round(time.monotonic() - t0, 2)}
