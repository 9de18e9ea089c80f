"""parity/telemetry: parsers on captured output (tests/data/telemetry/README.md), the NVML
sampler against a fake module faithful to pynvml's names and return shapes (values from the
H100 capture), the sampler thread, the point summary and its verdict, CPU affinity, and the
engine's own clock beside the client's."""

from __future__ import annotations

import os
import sys
import threading
import types
from pathlib import Path

import pytest

from parity.engines import llama, vllm
from parity.config import TelemetryConfig
from parity.runners.local import LocalRunner
from parity.metrics.serving import RequestRecord
from parity.gpu import nvidia_smi, throttle
from parity.telemetry import affinity, engine_timing, point_summary, procfs
from parity.telemetry.nvml_gpu import NvmlGpu
from parity.telemetry.sampler import Sampler

DATA = Path(__file__).resolve().parent.parent / "data" / "telemetry"


# ------------------------------------------------------------------ nvidia-smi


def test_smi_idle_h100_capture():
    (g,) = nvidia_smi.parse_telemetry((DATA / "nvidia-smi-telemetry-h100-idle.csv").read_text())
    assert g == {"index": 0, "sm_mhz": 345, "mem_mhz": 2619, "power_w": 74.63, "temp_c": 51, "util_gpu_pct": 0, "util_mem_pct": 0, "mem_used_mib": 0, "reasons": ["GpuIdle"]}


def test_smi_busy_h100_capture_is_a_power_cap():
    (g,) = nvidia_smi.parse_telemetry((DATA / "nvidia-smi-telemetry-h100-busy.csv").read_text())
    assert (g["sm_mhz"], g["mem_mhz"], g["power_w"], g["temp_c"], g["util_gpu_pct"]) == (1395, 2619, 178.86, 64, 32)
    assert g["reasons"] == ["SwPowerCap"] and throttle.slowdowns(g["reasons"]) == ["SwPowerCap"]


def test_smi_header_is_skipped_and_na_fields_are_none():
    assert len(nvidia_smi.parse_telemetry((DATA / "nvidia-smi-telemetry-h100-header.csv").read_text())) == 1
    (g,) = nvidia_smi.parse_telemetry("1980, 2619, 218.4, 60, 97, 40, [N/A], 0x0000000000000000\n")  # a GB10-like memory.used
    assert g["mem_used_mib"] is None and g["sm_mhz"] == 1980 and g["reasons"] == []
    assert nvidia_smi.parse_telemetry("Field \"clocks.sm\" is not a valid field to query.\n") == []


def test_throttle_decode_names_unknown_bits():
    assert throttle.decode(0x1 | 0x40 | 0x400) == ["GpuIdle", "HwThermalSlowdown", "0x400"]
    assert throttle.decode(None) is None and throttle.parse_mask("[N/A]") is None


# ------------------------------------------------------------------ NVML (fake pynvml)


class _NVMLError(Exception):
    pass


class _Util:  # c_nvmlUtilization_t
    def __init__(self, gpu, memory):
        self.gpu, self.memory = gpu, memory


class _Mem:  # c_nvmlMemory_t (bytes)
    def __init__(self, total, free, used):
        self.total, self.free, self.used = total, free, used


class _Proc:  # c_nvmlProcessInfo_t
    def __init__(self, pid, mem):
        self.pid, self.usedGpuMemory = pid, mem


def fake_pynvml(memory_supported: bool = True, old_names: bool = False, procs=(), count: int = 1):
    """pynvml's names and shapes; values as the H100 answered (tests/data/telemetry/nvml-h100-idle.txt)."""
    nv = types.ModuleType("pynvml")
    nv.NVML_CLOCK_SM, nv.NVML_CLOCK_MEM, nv.NVML_TEMPERATURE_GPU = 1, 2, 0
    nv.NVMLError = _NVMLError
    nv.shutdowns = 0
    nv.nvmlInit = lambda: None

    def shutdown():
        nv.shutdowns += 1

    def mem(h):
        if not memory_supported:
            raise _NVMLError("Not Supported")
        return _Mem(85520809984, 85520809984 - 503316480, 503316480)

    nv.nvmlShutdown = shutdown
    nv.nvmlDeviceGetCount = lambda: count
    nv.nvmlDeviceGetHandleByIndex = lambda i: ("handle", i)
    nv.nvmlDeviceGetClockInfo = lambda h, t: {1: 345, 2: 2619}[t]
    nv.nvmlDeviceGetPowerUsage = lambda h: 74619  # milliwatts
    nv.nvmlDeviceGetTemperature = lambda h, s: 51
    nv.nvmlDeviceGetUtilizationRates = lambda h: _Util(0, 0)
    nv.nvmlDeviceGetMemoryInfo = mem
    nv.nvmlDeviceGetComputeRunningProcesses = lambda h: [_Proc(p, 512 << 20) for p in procs]
    prefix = "nvmlClocksThrottleReason" if old_names else "nvmlClocksEventReason"
    for bit, name in throttle.REASONS:
        setattr(nv, prefix + name, bit)
    if old_names:
        nv.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: 0x1
    else:
        nv.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 0x1
    return nv


@pytest.mark.parametrize("old_names", [False, True])
def test_nvml_sample_h100(old_names):
    gpu = NvmlGpu(fake_pynvml(old_names=old_names, procs=[558]))
    (g,) = gpu.sample()
    assert g == {"index": 0, "sm_mhz": 345, "mem_mhz": 2619, "power_w": 74.619, "temp_c": 51, "util_gpu_pct": 0, "util_mem_pct": 0, "mem_used_mib": 480, "reasons": ["GpuIdle"], "pids": [558]}
    assert gpu.unsupported == {}


def test_nvml_instant_power_beside_the_averaged_where_the_field_exists():
    import pynvml  # its constants and its c_nvmlFieldValue_t; the call itself stubbed

    def values(h, ids, ret=0):
        v = pynvml.c_nvmlFieldValue_t()
        v.fieldId, v.valueType, v.nvmlReturn = ids[0], pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, ret
        v.value.uiVal = 385946  # milliwatts
        return [v]

    nv = fake_pynvml()
    nv.NVML_FI_DEV_POWER_INSTANT, nv.nvmlDeviceGetFieldValues = pynvml.NVML_FI_DEV_POWER_INSTANT, values
    (g,) = NvmlGpu(nv).sample()
    assert g["power_w"] == 74.619 and g["power_instant_w"] == 385.946
    nv.nvmlDeviceGetFieldValues = lambda h, ids: values(h, ids, ret=pynvml.NVML_ERROR_NOT_SUPPORTED)
    gpu = NvmlGpu(nv)
    (g,) = gpu.sample()
    assert g["power_instant_w"] is None and gpu.unsupported == {"power_instant": "NVML field 186: 3"}
    assert "power_instant_w" not in NvmlGpu(fake_pynvml()).sample()[0]  # an nvidia-ml-py without the field


def test_nvml_samples_the_gpus_asked_alone():
    """A crossover arm's telemetry (parity.serving.crossover): its GPU's rows, under NVML's own index."""
    nv = fake_pynvml(count=2)
    nv.nvmlDeviceGetPowerUsage = lambda h: {0: 74619, 1: 512400}[h[1]]
    assert [(g["index"], g["power_w"]) for g in NvmlGpu(nv, [1]).sample()] == [(1, 512.4)]
    assert [g["index"] for g in NvmlGpu(nv).sample()] == [0, 1]  # one GPU per arm in turn: every GPU, as before
    with pytest.raises(ValueError, match=r"^GPU 2 is not among the 2 GPU\(s\) NVML lists$"):
        NvmlGpu(nv, [2])


def instant_field(nv, mw: dict[int, int], calls: list | None = None, ret: int = 0):
    """pynvml's NVML_FI_DEV_POWER_INSTANT and nvmlDeviceGetFieldValues answering mw[index] milliwatts
    (its own c_nvmlFieldValue_t); calls gets (thread name, handle, field ids) per call."""
    import pynvml

    def values(h, ids):
        if calls is not None:
            calls.append((threading.current_thread().name, h, list(ids)))
        v = pynvml.c_nvmlFieldValue_t()
        v.fieldId, v.valueType, v.nvmlReturn = ids[0], pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, ret
        v.value.uiVal = mw[h[1]]
        return [v]

    nv.NVML_FI_DEV_POWER_INSTANT, nv.nvmlDeviceGetFieldValues = pynvml.NVML_FI_DEV_POWER_INSTANT, values
    return nv


def test_the_power_lanes_reader_asks_the_instantaneous_field_alone():
    """One nvmlDeviceGetFieldValues call per GPU, for that field only (every other query of the fake
    raises); milliwatts -> watts (an idle and a loaded H200 reading of the power-forms capture)."""
    calls: list = []
    nv = instant_field(fake_pynvml(count=2), {0: 118942, 1: 860450}, calls)
    gpu = NvmlGpu(nv)

    def other(*a):
        raise AssertionError("the lane asked NVML for something else")

    for name in ("nvmlDeviceGetPowerUsage", "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo",
                 "nvmlDeviceGetClockInfo", "nvmlDeviceGetTemperature", "nvmlDeviceGetComputeRunningProcesses",
                 "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetCurrentClocksEventReasons"):
        setattr(nv, name, other)
    read, why = gpu.power_reader([1, 0])
    assert why is None and read() == [860.45, 118.942]
    assert [c[1:] for c in calls] == [(("handle", 1), [186]), (("handle", 0), [186])]
    no_field = NvmlGpu(fake_pynvml()).power_reader([0])
    assert no_field == (None, "the installed nvidia-ml-py does not name NVML_FI_DEV_POWER_INSTANT")


def test_the_sampler_runs_the_power_lane_on_its_own_thread_and_stops_it_first():
    calls: list = []
    nv = instant_field(fake_pynvml(), {0: 385946}, calls)
    s = Sampler(NvmlGpu(nv), "nvml", None, 0.05, 0.01).start()
    s.start_lane([0])
    threading.Event().wait(0.2)  # not a timing assertion: only lets a few reads happen
    s.stop()
    doc = s.lane_doc()
    assert not s.lane._thread.is_alive() and nv.shutdowns == 1  # the lane stopped, then the session closed
    assert {c[0] for c in calls} == {"parity-telemetry", "parity-power-lane"}  # the samples read the field too
    assert doc["field"] == "NVML_FI_DEV_POWER_INSTANT" and doc["interval_s"] == 0.01 and doc["gpus"] == [0]
    assert doc["note"] is None and doc["errors"] is None and doc["thinned"] == 0 and doc["samples"]
    ts = [r[0] for r in doc["samples"]]
    assert all(r[1:] == [385.946] for r in doc["samples"]) and ts == sorted(set(ts)) and ts[0] >= 0


class _SmiLike:
    source = "nvidia-smi"

    def sample(self):
        return []

    def close(self):
        pass


@pytest.mark.parametrize("case, note", [
    ("no-counter", "no energy counter to check"),
    ("no-interval", "off (no power_interval_s)"),
    ("smi", "the GPU is sampled by nvidia-smi, not NVML"),
    ("no-field", "the installed nvidia-ml-py does not name NVML_FI_DEV_POWER_INSTANT"),
    ("not-supported", "dropped after 3 failures in a row: NVML field 186: 3"),
])
def test_where_the_lane_cannot_read_it_says_why(case, note):
    import pynvml

    nv = fake_pynvml()
    if case == "not-supported":
        instant_field(nv, {0: 0}, ret=pynvml.NVML_ERROR_NOT_SUPPORTED)
    gpu = _SmiLike() if case == "smi" else NvmlGpu(nv)
    s = Sampler(gpu, "x", None, 0.05, None if case == "no-interval" else 0.01)
    s.t0 = 0.0
    s.start_lane([] if case == "no-counter" else [0])
    if s.lane is not None:
        s.lane._thread.join(timeout=10)  # three failed reads, then it gives up
        s.lane.stop()
    doc = s.lane_doc()
    assert doc["note"] == note and doc["samples"] == []
    assert case != "not-supported" or doc["errors"] == {"first": "NVML field 186: 3", "count": 3}


@pytest.mark.parametrize("value, got", [(0, "0"), (-0.02, "-0.02"), (0.2, "0.2"), (".nan", "nan")])
def test_the_power_lanes_interval_is_checked_with_the_profile(tmp_path, value, got):
    from parity.config import load_profile
    from parity.errors import EXIT_USAGE, ConfigError

    prof = tmp_path / "p.yaml"
    prof.write_text(f"extends: smoke\nserving: {{telemetry: {{power_interval_s: {value}}}}}\n")
    with pytest.raises(ConfigError) as e:
        load_profile(str(prof))
    assert e.value.key == "serving.telemetry.power_interval_s" and e.value.exit_code == EXIT_USAGE
    assert e.value.problem == f"must be > 0 and <= serving.telemetry.interval_s (0.1), got {got}"
    assert "\n" not in str(e.value)
    prof.write_text("extends: smoke\nserving: {telemetry: {power_interval_s: 0.1}}\n")  # as the samples': allowed
    assert load_profile(str(prof)).serving.telemetry.power_interval_s == 0.1
    assert load_profile("smoke").serving.telemetry.power_interval_s == TelemetryConfig().power_interval_s == 0.02


def test_smi_keeps_the_gpus_asked_and_asks_their_processes_alone():
    """Two captured GPU lines stacked (nvidia-smi writes one line per GPU); the compute processes asked with -i."""
    text = "".join((DATA / f"nvidia-smi-telemetry-h100-{k}.csv").read_text() for k in ("idle", "busy"))

    class Smi:
        host, argvs = "local", []

        def which(self, name):
            return "/usr/bin/nvidia-smi"

        def run(self, argv, timeout=None):
            self.argvs.append(argv)
            out = text if "--query-gpu" in argv[-2] else "4242, llama-server, 70000 MiB\n"
            return types.SimpleNamespace(ok=True, rc=0, stdout=out)

    from parity.telemetry.smi_gpu import SmiGpu

    runner = Smi()
    gpu, note = SmiGpu.open(runner, [1])
    (g,) = gpu.sample()
    assert note == "nvidia-smi"
    assert (g["index"], g["sm_mhz"], g["reasons"], g["pids"]) == (1, 1395, ["SwPowerCap"], [4242])
    assert runner.argvs[-1][:3] == ["nvidia-smi", "-i", "1"] and runner.argvs[-1][3].startswith("--query-compute-apps=")
    assert [g["index"] for g in SmiGpu.open(runner)[0].sample()] == [0, 1] and "-i" not in runner.argvs[-1]


def test_nvml_not_supported_memory_is_none_not_a_crash():
    gpu = NvmlGpu(fake_pynvml(memory_supported=False))
    (g,) = gpu.sample()
    assert g["mem_used_mib"] is None and g["sm_mhz"] == 345 and gpu.unsupported == {"memory": "Not Supported"}


def test_nvml_open_goes_through_parity_nvml(monkeypatch):
    nv = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    monkeypatch.delenv("PARITY_NO_NVML", raising=False)
    gpu, note = NvmlGpu.open()
    assert note == "nvml" and gpu.sample()[0]["temp_c"] == 51
    gpu.close()
    assert nv.shutdowns == 1
    monkeypatch.setenv("PARITY_NO_NVML", "1")
    assert NvmlGpu.open() == (None, "NVML disabled (PARITY_NO_NVML)")


# ------------------------------------------------------------------ /proc


def test_proc_parsers_on_captures():
    assert procfs.parse_loadavg("0.52 0.58 0.59 1/467 3607\n") == {"load1": 0.52, "load5": 0.58, "load15": 0.59, "running": 1, "tasks": 467}
    assert set(procfs.parse_loadavg((DATA / "proc-loadavg.txt").read_text())) == {"load1", "load5", "load15", "running", "tasks"}
    st = procfs.parse_stat((DATA / "proc-pid-stat.txt").read_text())
    assert st["pid"] == 3607 and st["comm"] == "cat" and st["ppid"] == 3599
    odd = "42 (a (b) c) S 1 42 42 0 -1 4194304 0 0 0 0 250 50 7 3 20 0 1 0 1 1 1 0 0\n"  # a comm with spaces and parens
    st = procfs.parse_stat(odd)
    assert st["comm"] == "a (b) c" and st["utime_s"] == 250 / procfs.TICK and st["cstime_s"] == 3 / procfs.TICK


def test_cpu_time_has_nanosecond_resolution():
    assert procfs.parse_schedstat("123456789 2000 7\n") == pytest.approx(0.123456789)
    assert procfs.parse_schedstat((DATA / "proc-task-schedstat.txt").read_text()) > 0
    run = procfs.run_seconds(os.getpid())
    assert run is None or run > 0  # this interpreter has run: more than zero, not a 10 ms tick's floor
    assert procfs.cpu_seconds([os.getpid()])[os.getpid()] > 0 and procfs.self_cpu()["self_s"] > 0


def test_proc_readers_on_this_process():
    assert procfs.tree(os.getpid())[0] == os.getpid()
    assert procfs.stat(2**22 + 12345) is None and procfs.tree(2**22 + 12345) == [2**22 + 12345]


# ------------------------------------------------------------------ the sampler


class _FailingGpu:
    source = "nvidia-smi"
    unsupported: dict = {}

    def __init__(self):
        self.calls = 0

    def sample(self):
        self.calls += 1
        raise RuntimeError("nvidia-smi failed (exit 9): boom")

    def close(self):
        pass


def test_sampler_records_host_and_drops_a_failing_gpu_source():
    gpu = _FailingGpu()
    s = Sampler(gpu, "nvidia-smi", os.getpid(), 0.01).start()
    threading.Event().wait(0.2)  # not a timing assertion: only lets a few samples happen
    s.stop()
    assert s.samples and all("load1" in x for x in s.samples) and not s._thread.is_alive()
    assert gpu.calls == 3 and s.gpu is None and "dropped after 3 failures" in s.gpu_note
    assert s.errors["gpu"]["count"] == 3 and "boom" in s.errors["gpu"]["first"]
    cpu = s.cpu()
    assert cpu["client_cpu_s"] >= 0 and "server_cpu_s" in cpu


# ------------------------------------------------------------------ summary and verdict


def _gpu(pids, reasons, sm=1980, power=200.0):
    return {"index": 0, "sm_mhz": sm, "mem_mhz": 2619, "power_w": power, "temp_c": 60, "util_gpu_pct": 90, "util_mem_pct": 40, "mem_used_mib": None, "reasons": reasons, "pids": pids}


def test_a_foreign_compute_process_invalidates_the_point():
    samples = [{"t": 0.0, "load1": 1.0, "gpus": [_gpu([100], [])]}, {"t": 0.1, "load1": 2.0, "gpus": [_gpu([100, 777], ["GpuIdle"])]}]
    s = point_summary.summarize(samples, "nvml", "nvml", {}, {100, 101}, self_pid=5)
    assert s["foreign_pids"] == [777] and s["slowdowns"] == {} and s["throttle_reasons"] == {"GpuIdle": 1}
    problems, flags = point_summary.verdict(s)
    assert len(problems) == 1 and "pid 777" in problems[0] and flags == []
    assert s["host"]["load1"] == {"min": 1.0, "median": 1.5, "max": 2.0}
    assert s["gpu"]["per_gpu"][0]["sm_mhz"] == {"min": 1980, "median": 1980, "max": 1980} and s["gpu"]["per_gpu"][0]["mem_used_mib"] is None


def test_a_throttle_flags_the_point_but_does_not_invalidate_it():
    samples = [{"t": 0.0, "load1": 1.0, "gpus": [_gpu([100], ["SwPowerCap"], sm=1395)]}, {"t": 0.1, "load1": 1.0, "gpus": [_gpu([100], ["ApplicationsClocksSetting"])]}]
    s = point_summary.summarize(samples, "nvml", "nvml", {}, {100})
    problems, flags = point_summary.verdict(s)
    assert problems == [] and flags == ["GPU clocks slowed: SwPowerCap in 1/2 samples"]
    short = point_summary.short(s, "telemetry/x.json")
    assert short["sm_mhz_median"] == 1687.5 and short["throttle"] == {"SwPowerCap": 1} and short["foreign_pids"] == []


def test_no_gpu_samples_say_why_and_judge_nothing():
    s = point_summary.summarize([{"t": 0.0, "load1": 0.5}], None, "no GPU telemetry: nvidia-ml-py not installed; nvidia-smi not found", {"client_cpu_s": 0.1}, {100})
    assert s["gpu"]["source"] is None and "nvidia-smi not found" in s["gpu"]["note"] and s["foreign_pids"] is None
    assert point_summary.verdict(s) == ([], [])


def test_pids_of_another_pid_namespace_are_not_called_foreign():
    samples = [{"t": 0.0, "load1": 1.0, "gpus": [_gpu([31337], [])]}]
    s = point_summary.summarize(samples, "nvml", "nvml", {}, {100}, visible=lambda pid: False)
    assert s["foreign_pids"] == [] and "not in this pid namespace" in s["attribution_note"]


# ------------------------------------------------------------------ affinity


class _Runner:
    host = "local"

    def __init__(self, taskset=True):
        self.taskset = taskset

    def which(self, name):
        return "/usr/bin/taskset" if self.taskset else None


def test_affinity_plan_splits_cores_or_says_why_not():
    cfg = TelemetryConfig()
    p = affinity.plan(cfg, _Runner(), cpus=list(range(16)))
    assert p["applied"] and p["server_cpus"] == "0-13" and p["client_cpus"] == "14-15"
    assert affinity.plan(cfg, _Runner(), cpus=[0, 1]) == {"applied": False, "why": "not applied: only 2 cores (serving.telemetry.pin_min_cpus: 8)", "cpus": 2}
    assert "off" in affinity.plan(TelemetryConfig(pin_cpus=False), _Runner(), cpus=list(range(16)))["why"]
    assert "taskset" in affinity.plan(cfg, _Runner(taskset=False), cpus=list(range(16)))["why"]
    assert affinity.cpu_list([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8" and affinity.parse_cpu_list("0-2,5") == {0, 1, 2, 5}


def test_affinity_wraps_the_recorded_argv():
    from parity.engines.base import Launch

    la = Launch(["llama-server", "-m", "x.gguf"], {}, [], "/health", "x", "content")
    assert affinity.wrap(la, {"applied": False}).argv == la.argv
    assert affinity.wrap(la, {"applied": True, "server_cpus": "0-13"}).argv == ["taskset", "-c", "0-13", "llama-server", "-m", "x.gguf"]


def test_client_pin_is_restored():
    before = os.sched_getaffinity(0)
    one = min(before)
    with affinity.client_pinned({"applied": True, "client_cpus": str(one)}) as got:
        assert got == str(one) and os.sched_getaffinity(0) == {one}
    assert os.sched_getaffinity(0) == before


def test_the_sampler_beside_a_pinned_client_runs_in_its_cores_idle_time_alone():
    """A thread inherits its creator's cores: the sampler started inside client_pinned shares the load
    generator's, so it runs there at SCHED_IDLE (a tick over llama-server's threads took ~3.5 ms of the
    client's core and the sends falling in it were written late); unpinned, the default policy."""
    import time

    from parity.telemetry import watch

    one = min(os.sched_getaffinity(0))
    got = {}
    for name, plan in (("pinned", {"applied": True, "client_cpus": str(one)}), ("unpinned", None)):
        with watch.point(LocalRunner(), TelemetryConfig(interval_s=0.01), os.getpid(), plan) as w:
            deadline = time.monotonic() + 30
            while not w.sampler.samples and time.monotonic() < deadline:  # a tick: its policy is set before it
                time.sleep(0.01)
            tid = w.sampler._thread.native_id
            got[name] = (os.sched_getscheduler(tid), os.sched_getaffinity(tid))
    assert got["pinned"] == (os.SCHED_IDLE, {one})
    assert got["unpinned"] == (os.SCHED_OTHER, os.sched_getaffinity(0))


def test_taskset_is_real_where_present():
    if not LocalRunner().which("taskset"):
        pytest.skip("no taskset here")
    r = LocalRunner().run(["taskset", "-c", str(min(os.sched_getaffinity(0))), "cat", "/proc/self/status"], timeout=60)
    assert r.ok and f"Cpus_allowed_list:\t{min(os.sched_getaffinity(0))}" in r.stdout


# ------------------------------------------------------------------ engine timing


def _rec(send, first, end, timings=None):
    r = RequestRecord(send=send, first=first, token_times=[first, end], tokens=2, usage_tokens=2, expected_tokens=2, server_timings=timings)
    return r


def test_engine_timing_llama_server():
    t = {"prompt_n": 15, "prompt_ms": 6.397, "predicted_n": 32, "predicted_ms": 300.0, "predicted_per_second": 106.667}
    recs = [_rec(0.0, 0.010, 0.320, t), _rec(0.0, 0.012, 0.322, t)]
    et = engine_timing.compute(recs, llama.FAMILY)
    assert et["engine_decode_tps_mean"] == 106.667 and et["engine_perseq_tps_mean"] == pytest.approx(103.333, abs=1e-3)
    assert et["engine_decode_ms_mean"] == 300.0 and et["client_decode_ms_mean"] == pytest.approx(310.0)
    assert et["decode_overhead_ms_mean"] == pytest.approx(10.0) and et["client_overhead_ms_mean"] == pytest.approx(321.0 - 306.397, abs=1e-3)
    assert set(engine_timing.DEFINITIONS) <= set(et) and et["why"] == {}


def test_engine_timing_vllm_from_metrics_deltas():
    before = {"vllm:e2e_request_latency_seconds_sum": 1.0, "vllm:e2e_request_latency_seconds_count": 2.0, "vllm:request_decode_time_seconds_sum": 0.5, "vllm:request_decode_time_seconds_count": 2.0}
    after = {"vllm:e2e_request_latency_seconds_sum": 1.6, "vllm:e2e_request_latency_seconds_count": 4.0, "vllm:request_decode_time_seconds_sum": 0.9, "vllm:request_decode_time_seconds_count": 4.0}
    et = engine_timing.compute([_rec(0.0, 0.1, 0.31)], vllm.FAMILY, before, after)
    assert et["engine_e2e_ms_mean"] == 300.0 and et["engine_decode_ms_mean"] == 200.0 and et["client_overhead_ms_mean"] == pytest.approx(10.0)
    assert et["engine_decode_tps_mean"] is None and "per-request timings" in et["why"]["engine_decode_tps_mean"]
