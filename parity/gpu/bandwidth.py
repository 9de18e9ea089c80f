"""Peak memory bandwidth: the published figure for the machine's GPU (by parity's hardware
class and the GPU's name: SXM and PCIe H100s share a class), and a measured one where the
machine allows (a device-to-device copy through torch on a GPU; a numpy copy of a buffer
much larger than the last-level cache on a CPU).  Both go to bandwidth.json beside
hardware.txt, and one line is appended to hardware.txt.  A measured figure is kept per machine
and boot (cache_dir()/bandwidth): later runs reuse it and say when it was measured, instead of
paying the copy again (a torch start and a 1 GiB device buffer on a GPU, a 256 MiB-1 GiB copy
on a CPU); PARITY_BANDWIDTH=fresh measures anew, off skips it."""

from __future__ import annotations

import os
import re
import time
from parity.filelock import lock_path, locked
from parity.files import atomic_write_text
from parity.paths import cache_dir

# (hardware class, GPU name pattern, label, GB/s, source).  First match wins: keep the more
# specific names (PCIe, NVL, H200) above the generic H100.
PUBLISHED = [
    ("gb10_or_workstation_blackwell", r"GB10", "NVIDIA GB10 (DGX Spark), LPDDR5x", 273.0, "NVIDIA DGX Spark datasheet: 273 GB/s LPDDR5x unified memory"),
    ("hopper", r"H200", "NVIDIA H200 SXM, HBM3e", 4800.0, "NVIDIA H200 Tensor Core GPU datasheet: 4.8 TB/s"),
    ("hopper", r"H100.*PCIe", "NVIDIA H100 PCIe, HBM2e", 2000.0, "NVIDIA H100 Tensor Core GPU datasheet: H100 PCIe 2 TB/s"),
    ("hopper", r"H100.*NVL", "NVIDIA H100 NVL, HBM3", 3900.0, "NVIDIA H100 Tensor Core GPU datasheet: H100 NVL 3.9 TB/s"),
    ("hopper", r"H100", "NVIDIA H100 SXM5, HBM3", 3350.0, "NVIDIA H100 Tensor Core GPU datasheet: H100 SXM 3.35 TB/s"),
    ("datacenter_blackwell", r"B200", "NVIDIA B200, HBM3e", 8000.0, "NVIDIA Blackwell (DGX/HGX B200) datasheet: 8 TB/s per GPU"),
]  # fmt: skip

GIB = 1 << 30


def published(hardware_class: str | None, gpu_name: str | None) -> dict:
    """{gbps, label, source} of the first entry whose class and name match; else {gbps: None, reason}."""
    for cls, pat, label, gbps, source in PUBLISHED:
        if hardware_class == cls and gpu_name and re.search(pat, gpu_name, re.I):
            return {"gbps": gbps, "label": label, "source": source}
    if hardware_class in (None, "cpu_only"):
        return {"gbps": None, "reason": "no GPU: no published figure for this CPU's memory (the measured copy is the roofline)"}
    return {"gbps": None, "reason": f"no published figure for {gpu_name or 'this GPU'} ({hardware_class}) in parity.gpu.bandwidth.PUBLISHED"}


def _meminfo_available() -> int | None:
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def llc_bytes() -> int | None:
    """The largest cache /sys reports for cpu0 (the last level), in bytes."""
    import glob

    best = None
    for p in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        try:
            t = open(p).read().strip()
            v = int(t[:-1]) * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[t[-1]] if t[-1] in "KMG" else int(t)
        except (OSError, ValueError, KeyError):
            continue
        best = v if best is None else max(best, v)
    return best


def measure_cpu(size: int | None = None, repeats: int = 5) -> dict:
    """numpy copy of `size` bytes (default: 8 x the last-level cache, at least 256 MiB, at most
    1 GiB, and 256 MiB when less than 4 x that is free), best of `repeats`: bytes read + written
    / time (write-allocate traffic not counted)."""
    import numpy as np

    if size is None:
        size = min(GIB, max(256 << 20, 8 * (llc_bytes() or 0)))
        avail = _meminfo_available()
        if avail is not None and avail < 4 * size:
            size = 256 << 20
    src = np.ones(size, dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # first touch of dst, outside the timing
    best = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return {"gbps": round(2 * size / best / 1e9, 3), "method": f"numpy copy of {size >> 20} MiB on the CPU, best of {repeats}, one thread",
            "bytes": 2 * size, "counted": "bytes read + bytes written", "best_s": round(best, 6)}  # fmt: skip


def measure_gpu(size: int = GIB, repeats: int = 10) -> dict:
    """measure_gpu_here in a child process: a CUDA context opened in parity's own process would
    stay on the GPU (about 1 GiB, a compute process) through every measured point after it
    (seen on the H100: the client's pid among the compute processes of each point)."""
    import json
    import subprocess
    import sys

    code = f"import json; from parity.gpu.bandwidth import measure_gpu_here; print(json.dumps(measure_gpu_here({size}, {repeats})))"
    try:
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError, OSError) as e:
        return {"gbps": None, "reason": f"device copy measurement failed: {e}"}


def measure_gpu_here(size: int = GIB, repeats: int = 10) -> dict:
    """torch device-to-device copy_ of `size` bytes timed with CUDA events, best of `repeats`."""
    try:
        import torch
    except ImportError:
        return {"gbps": None, "reason": "torch is not importable: no device copy measured"}
    if not torch.cuda.is_available():
        return {"gbps": None, "reason": "torch sees no CUDA device"}
    src = torch.empty(size, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize()
    best = None
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        torch.cuda.synchronize()
        dt = a.elapsed_time(b) / 1000
        best = dt if best is None else min(best, dt)
    del src, dst
    torch.cuda.empty_cache()
    return {"gbps": round(2 * size / best / 1e9, 3), "method": f"torch copy_ of {size >> 20} MiB device to device (CUDA events), best of {repeats}",
            "bytes": 2 * size, "counted": "bytes read + bytes written", "best_s": round(best, 6)}  # fmt: skip


def bandwidth(info: dict, local: bool = True, measure: bool = True, fresh: bool = False) -> dict:
    """bandwidth.json for a hardware inventory (parity.gpu.hardware.inventory)."""
    gpus = info.get("gpus") or []
    name = gpus[0]["name"] if gpus else None
    doc = {"hardware_class": info.get("hardware_class"), "gpu": name, "published": published(info.get("hardware_class"), name)}
    if not measure:
        doc["measured"] = {"gbps": None, "reason": "not measured (PARITY_BANDWIDTH=off)"}
    elif not local:
        doc["measured"] = {"gbps": None, "reason": "not measured: the run's host is remote (parity measures on its own host)"}
    else:
        key = _machine_key("gpu:" + str(name) if gpus else "cpu")
        doc["measured"] = measured_once(key, bool(gpus), fresh)
    doc["device"] = "gpu" if gpus else "cpu"
    if not gpus:
        doc["llc_bytes"] = llc_bytes()  # a step that fits here is not bound by the DRAM figures
    return doc


def measured_once(key: str, gpu: bool, fresh: bool = False) -> dict:
    """The kept figure of this machine and boot, else a measurement, kept.  Under the key's
    lock: two runs starting at once measure one after the other (side by side, each copy would
    get about half the bandwidth, and that half would be kept), so the second finds the first's."""
    with locked(lock_path(_cache_file(key))):
        return (None if fresh else _cached(key)) or _remember(key, _measure(gpu))


def _measure(gpu: bool) -> dict:
    try:
        return measure_gpu() if gpu else measure_cpu()
    except Exception as e:  # noqa: BLE001 - a failed measurement is recorded, never fatal
        return {"gbps": None, "reason": f"measurement failed: {type(e).__name__}: {e}"}


def _machine_key(device: str) -> str:
    """This machine, this boot, this device: a reboot (new clocks, a new driver) measures again."""
    import hashlib
    import socket

    try:
        boot = open("/proc/sys/kernel/random/boot_id").read().strip()
    except OSError:
        boot = "no-boot-id"
    return hashlib.sha256(f"{socket.gethostname()}|{boot}|{device}".encode()).hexdigest()[:20]


def _cache_file(key: str):
    return cache_dir() / "bandwidth" / f"{key}.json"


def _cached(key: str) -> dict | None:
    import json

    try:
        m = json.loads(_cache_file(key).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(m, dict) or not m.get("gbps") or not m.get("measured_at"):
        return None
    return {**m, "cached": True}


def _remember(key: str, m: dict) -> dict:
    """A figure (never a failure: the next run tries again) kept for this machine and boot."""
    import json

    if m.get("gbps"):
        m = {**m, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        try:
            atomic_write_text(_cache_file(key), json.dumps(m))  # never half a file, whenever the writer dies
        except OSError:
            pass  # an unwritable cache only costs the next run a measurement
    return {**m, "cached": False} if m.get("gbps") else m


def line(doc: dict) -> str:
    """The hardware.txt line: memory_bandwidth=<published>; measured <figure>."""
    p, m = doc["published"], doc["measured"]
    pub = f"{p['gbps']:g} GB/s published ({p['source']})" if p.get("gbps") else "no published figure"
    when = f", measured {m['measured_at']} this boot" + (" (kept from an earlier run)" if m.get("cached") else "") if m.get("measured_at") else ""
    meas = f"{m['gbps']:g} GB/s measured ({m['method']}{when})" if m.get("gbps") else f"not measured ({m.get('reason')})"
    return f"memory_bandwidth={pub}; {meas}"


def write_bandwidth(run_dir, runner, info: dict) -> dict | None:
    """bandwidth.json (and its hardware.txt line) in run_dir (a RunDir, or None: nothing);
    PARITY_BANDWIDTH=off skips the copy, fresh measures even when this boot has a figure."""
    if run_dir is None:
        return None
    mode = os.environ.get("PARITY_BANDWIDTH", "on")
    doc = bandwidth(info, local=getattr(runner, "host", "local") == "local", measure=mode != "off", fresh=mode == "fresh")
    run_dir.write_json("bandwidth.json", doc)
    hw = run_dir.path / "hardware.txt"
    if hw.is_file():
        run_dir.write_text("hardware.txt", hw.read_text() + line(doc) + "\n")
    return doc


def load(run_dir) -> dict | None:
    import json
    from pathlib import Path

    try:
        return json.loads((Path(run_dir) / "bandwidth.json").read_text())
    except (OSError, ValueError):
        return None
