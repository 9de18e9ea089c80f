"""GPU samples through NVML (pynvml, the nvidia-ml-py package): one NVML session per point.

Every query is asked on its own: one the GPU does not support (the GB10 answers
Not Supported for memory) is None in the sample and named once in `unsupported`,
never an error for the point.  power_w is nvmlDeviceGetPowerUsage (on Ampere and newer a 1 s
average); power_instant_w, beside it where the installed nvidia-ml-py names the field, is
NVML_FI_DEV_POWER_INSTANT (parity.telemetry.energy integrates it when every sample has it).
power_reader() reads that field alone, for the sampler's power lane."""

from __future__ import annotations

from parity.gpu import throttle
from parity.gpu.nvidia_smi import open_nvml

# c_nvmlValue_t's member for each NVML_VALUE_TYPE_* (0 double ... 6 unsigned short)
VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


class NvmlGpu:
    source = "nvml"

    def __init__(self, nv, indices: list[int] | None = None):
        """indices: the NVML indices sampled (None: every GPU); one NVML does not list is a ValueError."""
        self.nv = nv
        count = nv.nvmlDeviceGetCount()
        indices = list(range(count)) if indices is None else list(indices)
        if missing := [i for i in indices if not 0 <= i < count]:
            raise ValueError(f"GPU {missing[0]} is not among the {count} GPU(s) NVML lists")
        self.handles = {i: nv.nvmlDeviceGetHandleByIndex(i) for i in indices}
        self.table = throttle.table_from(nv)
        self.unsupported: dict[str, str] = {}  # query -> the first error it gave

    @classmethod
    def open(cls, indices: list[int] | None = None) -> tuple[NvmlGpu | None, str]:
        """(sampler of those GPUs, "nvml") or (None, why NVML cannot answer here)."""

        nv, note = open_nvml()
        if nv is None:
            return None, note
        try:
            return cls(nv, indices), "nvml"
        except Exception as e:
            _shutdown(nv)
            return None, f"NVML: {e}"

    def _ask(self, what: str, fn):
        try:
            return fn()
        except Exception as e:  # NVMLError_NotSupported and friends
            self.unsupported.setdefault(what, str(e) or type(e).__name__)
            return None

    def _reasons(self, h) -> int | None:
        nv = self.nv
        fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(nv, "nvmlDeviceGetCurrentClocksThrottleReasons")
        return self._ask("clock_reasons", lambda: int(fn(h)))

    def _instant(self, h) -> dict:
        """{"power_instant_w": watts or None}, or {} where nvidia-ml-py has no such field."""
        field = getattr(self.nv, "NVML_FI_DEV_POWER_INSTANT", None)
        if field is None:
            return {}
        mw = self._ask("power_instant", lambda: field_value(self.nv, h, field))  # milliwatts
        return {"power_instant_w": None if mw is None else round(mw / 1000.0, 3)}

    def sample(self) -> list[dict]:
        nv, out = self.nv, []
        for i, h in self.handles.items():
            util = self._ask("utilization", lambda: nv.nvmlDeviceGetUtilizationRates(h))
            mem = self._ask("memory", lambda: nv.nvmlDeviceGetMemoryInfo(h))
            power = self._ask("power", lambda: nv.nvmlDeviceGetPowerUsage(h))  # milliwatts
            procs = self._ask("processes", lambda: nv.nvmlDeviceGetComputeRunningProcesses(h))
            out.append({
                "index": i,
                "sm_mhz": self._ask("sm_clock", lambda: int(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))),
                "mem_mhz": self._ask("mem_clock", lambda: int(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM))),
                "power_w": None if power is None else round(power / 1000.0, 3),
                **self._instant(h),
                "temp_c": self._ask("temperature", lambda: int(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))),
                "util_gpu_pct": None if util is None else int(util.gpu),
                "util_mem_pct": None if util is None else int(util.memory),
                "mem_used_mib": None if mem is None else int(mem.used) // (1 << 20),
                "reasons": throttle.decode(self._reasons(h), self.table),
                "pids": None if procs is None else sorted(int(p.pid) for p in procs),
            })  # fmt: skip
        return out

    def power_reader(self, indices: list[int]):
        """(read, None) for the power lane: read() -> watts of NVML_FI_DEV_POWER_INSTANT per index, one
        nvmlDeviceGetFieldValues call per GPU and nothing else; (None, why) where nvidia-ml-py lacks the field."""
        nv = self.nv
        field = getattr(nv, "NVML_FI_DEV_POWER_INSTANT", None)
        if field is None:
            return None, "the installed nvidia-ml-py does not name NVML_FI_DEV_POWER_INSTANT"
        handles = [self.handles[i] if i in self.handles else nv.nvmlDeviceGetHandleByIndex(i) for i in indices]

        def read() -> list[float]:
            return [field_value(nv, h, field) / 1000.0 for h in handles]  # milliwatts

        return read, None

    def close(self) -> None:
        _shutdown(self.nv)


def field_value(nv, h, field: int) -> float:
    """One NVML field's value (nvmlDeviceGetFieldValues); RuntimeError where the GPU answers an error for it."""
    (v,) = nv.nvmlDeviceGetFieldValues(h, [field])
    if v.nvmlReturn != 0:
        raise RuntimeError(f"NVML field {field}: {getattr(nv, 'nvmlErrorString', str)(v.nvmlReturn)}")
    return float(getattr(v.value, VALUE_MEMBERS[v.valueType]))


def _shutdown(nv) -> None:
    try:
        nv.nvmlShutdown()
    except Exception:
        pass
