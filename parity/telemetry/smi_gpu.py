"""GPU samples through nvidia-smi (where NVML is not importable): one query per sample,
run through the Runner; compute processes about once a second.  parse_query() reads
captured output (tests/data/telemetry/)."""

from __future__ import annotations

from parity.telemetry import throttle
from parity.gpu.nvidia_smi import QUERY_APPS, parse_compute_apps

FIELDS = ("clocks.sm", "clocks.mem", "power.draw", "temperature.gpu", "utilization.gpu", "utilization.memory", "memory.used", "clocks_throttle_reasons.active")
QUERY = ["nvidia-smi", f"--query-gpu={','.join(FIELDS)}", "--format=csv,noheader,nounits"]
KEYS = ("sm_mhz", "mem_mhz", "power_w", "temp_c", "util_gpu_pct", "util_mem_pct", "mem_used_mib")
APPS_EVERY = 10  # samples between two compute-process queries


def _num(v: str):
    v = v.strip()
    try:
        f = float(v)
    except ValueError:
        return None  # [N/A], [Not Supported]
    return int(f) if f.is_integer() and "." not in v else f


def parse_query(text: str) -> list[dict]:
    """One dict per GPU line of QUERY's output; a field the GPU does not report is None."""
    out = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(FIELDS) or parts[0].startswith("clocks"):
            continue  # a header or an error line
        row = {"index": len(out), **{k: _num(v) for k, v in zip(KEYS, parts)}}
        row["reasons"] = throttle.decode(throttle.parse_mask(parts[-1]))
        out.append(row)
    return out


class SmiGpu:
    source = "nvidia-smi"

    def __init__(self, runner):
        self.runner = runner
        self.unsupported: dict[str, str] = {}
        self._count = 0

    @classmethod
    def open(cls, runner) -> tuple[SmiGpu | None, str]:
        if not runner.which("nvidia-smi"):
            return None, "nvidia-smi not found"
        return cls(runner), "nvidia-smi"

    def sample(self) -> list[dict]:
        res = self.runner.run(QUERY, timeout=30)
        if not res.ok:
            raise RuntimeError(f"nvidia-smi failed (exit {res.rc}): {res.tail(1).strip() or 'no output'}")
        gpus = parse_query(res.stdout)
        if self._count % APPS_EVERY == 0:  # one process list for every GPU (no per-GPU split needed for the verdict)
            apps = self.runner.run(QUERY_APPS, timeout=30)
            pids = sorted(a["pid"] for a in parse_compute_apps(apps.stdout)) if apps.ok else None
            for g in gpus:
                g["pids"] = pids
        self._count += 1
        return gpus

    def close(self) -> None:
        pass
