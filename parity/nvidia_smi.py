"""The nvidia-smi tool (and NVML when importable): GPUs and compute processes."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

QUERY_GPU = ["nvidia-smi", "--query-gpu=name,driver_version,compute_cap,memory.total", "--format=csv,noheader"]
QUERY_APPS = ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"]
_CUDA = re.compile(r"CUDA Version:\s*([0-9.]+)")


@dataclass
class Gpu:
    name: str
    driver: str
    compute_cap: str | None  # "9.0"; None when not reported
    memory_mib: int | None  # None for unified memory ("[N/A]", GB10)


def _na(v: str) -> bool:
    return v.strip() in ("[N/A]", "N/A", "[Not Supported]", "")


def parse_query_gpu(text: str) -> list[Gpu]:
    gpus = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("name,"):
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4:
            continue
        name, driver, cc, mem = parts[:4]
        mem_mib = None if _na(mem) else int(re.sub(r"[^0-9]", "", mem) or 0)
        gpus.append(Gpu(name, driver, None if _na(cc) else cc, mem_mib))
    return gpus


def parse_cuda_version(banner: str) -> str | None:
    m = _CUDA.search(banner)
    return m.group(1) if m else None


def parse_compute_apps(text: str) -> list[dict]:
    apps = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if parts and parts[0].isdigit():
            apps.append({"pid": int(parts[0]), "name": parts[1] if len(parts) > 1 else "", "memory": parts[2] if len(parts) > 2 else ""})
    return apps


def nvml_compute_apps() -> list[dict] | None:
    """Compute processes via NVML; None when NVML is unavailable."""
    if os.environ.get("PARITY_NO_NVML"):
        return None
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        apps = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                apps.append({"pid": p.pid, "name": "", "memory": str(getattr(p, "usedGpuMemory", "") or "")})
        return apps
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def compute_apps(runner) -> tuple[list[dict] | None, str]:
    """(apps, source).  apps is None when neither NVML nor nvidia-smi answered."""
    apps = nvml_compute_apps() if runner.host == "local" else None
    if apps is not None:
        return apps, "nvml"
    if not runner.which("nvidia-smi"):
        return None, "nvidia-smi not found"
    res = runner.run(QUERY_APPS, timeout=30)
    if not res.ok:
        return None, f"nvidia-smi failed (exit {res.rc}): {res.tail(1)}"
    return parse_compute_apps(res.stdout), "nvidia-smi"


def inventory(runner) -> tuple[list[Gpu], str | None, str]:
    """(gpus, cuda_version, note)."""
    if not runner.which("nvidia-smi"):
        return [], None, "nvidia-smi not found"
    res = runner.run(QUERY_GPU, timeout=30)
    if not res.ok:
        return [], None, f"nvidia-smi failed (exit {res.rc}): {res.tail(1)}"
    banner = runner.run(["nvidia-smi"], timeout=30)
    return parse_query_gpu(res.stdout), parse_cuda_version(banner.stdout), "nvidia-smi"
