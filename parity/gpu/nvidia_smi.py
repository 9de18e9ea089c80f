"""The nvidia-smi tool (and NVML when importable, local only): GPUs, compute processes and the
telemetry sample (clocks, power, temperature, use, throttle reasons) where NVML is not importable.

Pure parse_*() over captured text (samples in tests/data/hw/ and tests/data/telemetry/) plus
thin runner calls.
GB10 (unified memory) reports memory.* as "[N/A]": memory_mib is then None.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from parity.gpu import throttle

QUERY_GPU = ["nvidia-smi", "--query-gpu=name,driver_version,compute_cap,memory.total", "--format=csv,noheader"]
# drivers older than 510 do not know compute_cap: the query fails as a whole, so retry without it
QUERY_GPU_OLD = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
QUERY_APPS = ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"]
TELEMETRY_FIELDS = (
    "clocks.sm", "clocks.mem", "power.draw", "temperature.gpu", "utilization.gpu", "utilization.memory", "memory.used",
    "clocks_throttle_reasons.active",
)
QUERY_TELEMETRY = ["nvidia-smi", f"--query-gpu={','.join(TELEMETRY_FIELDS)}", "--format=csv,noheader,nounits"]
TELEMETRY_KEYS = ("sm_mhz", "mem_mhz", "power_w", "temp_c", "util_gpu_pct", "util_mem_pct", "mem_used_mib")
_CUDA = re.compile(r"CUDA Version:\s*([0-9.]+)")
_MIB = re.compile(r"^\s*(\d+)\s*(MiB)?\s*$")
_NA = ("[N/A]", "N/A", "[Not Supported]", "Not Supported", "")


@dataclass
class Gpu:
    name: str
    driver: str
    compute_cap: str | None  # "9.0"; None when not reported
    memory_mib: int | None  # None for unified memory ("[N/A]", GB10)


def _na(v: str) -> bool:
    return v.strip() in _NA


def _mib(v: str) -> int | None:
    m = _MIB.match(v)
    return int(m.group(1)) if m and not _na(v) else None


def parse_query_gpu(text: str, fields: tuple[str, ...] = ("name", "driver_version", "compute_cap", "memory.total")) -> list[Gpu]:
    """Rows of `--query-gpu=<fields> --format=csv[,noheader]` (a header line is skipped)."""
    gpus = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("name,") or line.startswith("name, "):
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < len(fields):
            continue  # an error line ("Field ... is not a valid field to query.")
        extra = len(parts) - len(fields)  # only the name (first field) can hold a comma
        parts = [", ".join(parts[: extra + 1])] + parts[extra + 1 :]
        row = dict(zip(fields, parts))
        cc = row.get("compute_cap", "")
        gpus.append(Gpu(row["name"], row["driver_version"], None if _na(cc) else cc, _mib(row.get("memory.total", ""))))
    return gpus


def parse_cuda_version(banner: str) -> str | None:
    m = _CUDA.search(banner)
    return m.group(1) if m else None


def parse_compute_apps(text: str) -> list[dict]:
    """Rows of `--query-compute-apps=pid[,process_name,used_memory] --format=csv,noheader`.
    An idle GPU prints nothing; lines that do not start with a pid are ignored."""
    apps = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if not parts or not parts[0].isdigit():
            continue
        apps.append(
            {
                "pid": int(parts[0]),
                "name": parts[1] if len(parts) > 1 else "",
                "memory_mib": _mib(parts[2]) if len(parts) > 2 else None,
            }
        )
    return apps


def _num(v: str):
    v = v.strip()
    try:
        f = float(v)
    except ValueError:
        return None  # [N/A], [Not Supported]
    return int(f) if f.is_integer() and "." not in v else f


def parse_telemetry(text: str) -> list[dict]:
    """One dict per GPU line of QUERY_TELEMETRY's output; a field the GPU does not report is None."""
    out = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(TELEMETRY_FIELDS) or parts[0].startswith("clocks"):
            continue  # a header or an error line
        row = {"index": len(out), **{k: _num(v) for k, v in zip(TELEMETRY_KEYS, parts)}}
        row["reasons"] = throttle.decode(throttle.parse_mask(parts[-1]))
        out.append(row)
    return out


NO_LIBRARY = "NVML Shared Library Not Found"  # what pynvml's nvmlInit says then


def _has_nvml_library() -> bool:
    """Whether libnvidia-ml loads: on a box without the driver, asked before pynvml's import
    (~10 ms, paid by every start that looks at the GPU) rather than by its nvmlInit."""
    import ctypes

    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


def _nvml():
    """(pynvml after nvmlInit, "nvml") or (None, why): not installed, no driver, PARITY_NO_NVML set."""
    if os.environ.get("PARITY_NO_NVML"):
        return None, "NVML disabled (PARITY_NO_NVML)"
    if "pynvml" not in sys.modules:
        if importlib.util.find_spec("pynvml") is None:
            return None, "nvidia-ml-py not installed"
        if sys.platform.startswith("linux") and not _has_nvml_library():
            return None, f"NVML: {NO_LIBRARY}"
    import pynvml
    try:
        pynvml.nvmlInit()
    except Exception as e:  # NVMLError_LibraryNotFound / DriverNotLoaded
        return None, f"NVML: {e}"
    return pynvml, "nvml"


def open_nvml():
    """An NVML session the caller keeps (and ends with nvmlShutdown): (pynvml, "nvml") or (None, why)."""
    return _nvml()


def process_name(pid: int) -> str:
    """/proc/<pid>/comm, empty when the process is not visible from here."""
    return _comm(pid)


def nvml_call(fn):
    """(fn(pynvml), "nvml") inside one NVML session; (None, why) when NVML is unavailable or the query fails."""
    nv, note = _nvml()
    if nv is None:
        return None, note
    try:
        return fn(nv), note
    except Exception as e:
        return None, f"NVML: {e}"
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:
            pass


def _nvml_query(fn):
    return nvml_call(fn)[0]


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def nvml_gpus() -> tuple[list[dict] | None, str]:
    """GPUs (name, driver, compute_cap) via NVML; (None, why) when NVML cannot answer."""

    def query(nv):
        driver = _text(nv.nvmlSystemGetDriverVersion())
        gpus = []
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            major, minor = nv.nvmlDeviceGetCudaComputeCapability(h)
            gpus.append({"name": _text(nv.nvmlDeviceGetName(h)), "driver": driver, "compute_cap": f"{major}.{minor}"})
        return gpus

    return nvml_call(query)


def _comm(pid: int) -> str:
    """Process name for an NVML pid (NVML gives none); empty when it is not visible from here."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def nvml_compute_apps() -> list[dict] | None:
    """Compute processes via NVML; None when NVML is unavailable."""

    def query(nv):
        apps = []
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            for p in nv.nvmlDeviceGetComputeRunningProcesses(h):
                mem = getattr(p, "usedGpuMemory", None)
                apps.append({"pid": int(p.pid), "name": _comm(int(p.pid)), "memory_mib": mem // (1 << 20) if isinstance(mem, int) else None})
        return apps

    return _nvml_query(query)


def nvml_cuda_version() -> str | None:
    """CUDA driver version via NVML (13000 -> "13.0"); None when unavailable."""

    def query(nv):
        v = int(nv.nvmlSystemGetCudaDriverVersion())
        return f"{v // 1000}.{(v % 1000) // 10}"

    return _nvml_query(query)


def compute_apps(runner) -> tuple[list[dict] | None, str]:
    """(apps, source).  apps is None when neither NVML nor nvidia-smi answered; source says why."""
    apps = nvml_compute_apps() if runner.host == "local" else None
    if apps is not None:
        return apps, "nvml"
    if not runner.which("nvidia-smi"):
        return None, "nvidia-smi not found"
    res = runner.run(QUERY_APPS, timeout=30)
    if not res.ok:
        return None, f"nvidia-smi failed (exit {res.rc}): {res.tail(1).strip() or 'no output'}"
    return parse_compute_apps(res.stdout), "nvidia-smi"


def inventory(runner) -> tuple[list[Gpu], str | None, str]:
    """(gpus, cuda_version, note).  No nvidia-smi or a failing one -> ([], None, why)."""
    if not runner.which("nvidia-smi"):
        return [], None, "nvidia-smi not found"
    res = runner.run(QUERY_GPU, timeout=30)
    fields: tuple[str, ...] = ("name", "driver_version", "compute_cap", "memory.total")
    if not res.ok and "compute_cap" in res.tail(3):
        res = runner.run(QUERY_GPU_OLD, timeout=30)
        fields = ("name", "driver_version", "memory.total")
    if not res.ok:
        return [], None, f"nvidia-smi failed (exit {res.rc}): {res.tail(1).strip() or 'no output'}"
    gpus = parse_query_gpu(res.stdout, fields)
    banner = runner.run(["nvidia-smi"], timeout=30)
    cuda = parse_cuda_version(banner.stdout) if banner.ok else None
    if cuda is None and runner.host == "local":
        cuda = nvml_cuda_version()
    return gpus, cuda, "nvidia-smi"


def telemetry(runner) -> list[dict]:
    """One telemetry sample per GPU (parse_telemetry's rows); RuntimeError when nvidia-smi fails."""
    res = runner.run(QUERY_TELEMETRY, timeout=30)
    if not res.ok:
        raise RuntimeError(f"nvidia-smi failed (exit {res.rc}): {res.tail(1).strip() or 'no output'}")
    return parse_telemetry(res.stdout)


def compute_pids(runner, indices: list[int] | None = None) -> list[int] | None:
    """The compute processes' pids, sorted, by nvidia-smi alone (indices: on those GPUs only, -i);
    None when it fails."""
    only = [] if indices is None else ["-i", ",".join(map(str, indices))]
    res = runner.run([QUERY_APPS[0], *only, *QUERY_APPS[1:]], timeout=30)
    return sorted(a["pid"] for a in parse_compute_apps(res.stdout)) if res.ok else None
