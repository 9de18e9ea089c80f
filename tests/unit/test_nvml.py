"""NVML access (nvidia_smi.nvml_*): the one place parity talks to pynvml.

The fake module answers with what pynvml returned on the H100 (tests/data/hw/README.md):
str name and driver, cc (9, 0), CUDA driver version 13000."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types

import pytest

from parity import doctor
from parity.gpu import nvidia_smi
from parity.runners.local import LocalRunner


class _Proc:
    def __init__(self, pid, mem):
        self.pid, self.usedGpuMemory = pid, mem


def _fake_pynvml(init_error: Exception | None = None, query_error: Exception | None = None):
    nv = types.ModuleType("pynvml")
    nv.shutdowns = 0

    def init():
        if init_error:
            raise init_error

    def shutdown():
        nv.shutdowns += 1

    def driver():
        if query_error:
            raise query_error
        return "580.159.04"

    nv.nvmlInit, nv.nvmlShutdown = init, shutdown
    nv.nvmlSystemGetDriverVersion = driver
    nv.nvmlSystemGetCudaDriverVersion = lambda: 13000
    nv.nvmlDeviceGetCount = lambda: 1
    nv.nvmlDeviceGetHandleByIndex = lambda i: ("h", i)
    nv.nvmlDeviceGetName = lambda h: b"NVIDIA H100 80GB HBM3"  # older bindings return bytes
    nv.nvmlDeviceGetCudaComputeCapability = lambda h: (9, 0)
    nv.nvmlDeviceGetComputeRunningProcesses = lambda h: [_Proc(1, 512 << 20)]
    return nv


@pytest.fixture
def fake(monkeypatch):
    def install(**kw):
        nv = _fake_pynvml(**kw)
        monkeypatch.setitem(sys.modules, "pynvml", nv)
        monkeypatch.delenv("PARITY_NO_NVML", raising=False)
        return nv

    return install


def test_gpus_cuda_and_apps_through_one_session_each(fake):
    nv = fake()
    assert nvidia_smi.nvml_gpus() == ([{"name": "NVIDIA H100 80GB HBM3", "driver": "580.159.04", "compute_cap": "9.0"}], "nvml")
    assert nvidia_smi.nvml_cuda_version() == "13.0"
    (app,) = nvidia_smi.nvml_compute_apps()
    assert app["pid"] == 1 and app["memory_mib"] == 512
    assert nv.shutdowns == 3


def test_unavailable_nvml_says_why(fake, monkeypatch):
    fake(init_error=RuntimeError("Driver Not Loaded"))
    assert nvidia_smi.nvml_gpus() == (None, "NVML: Driver Not Loaded")
    assert nvidia_smi.nvml_compute_apps() is None
    nv = fake(query_error=RuntimeError("Unknown Error"))
    assert nvidia_smi.nvml_gpus() == (None, "NVML: Unknown Error") and nv.shutdowns == 1
    monkeypatch.setenv("PARITY_NO_NVML", "1")
    assert nvidia_smi.nvml_gpus() == (None, "NVML disabled (PARITY_NO_NVML)")


def test_doctor_gpu_row_uses_nvml_first(fake):
    fake()
    gpus, source = doctor.gpu_info(LocalRunner())
    assert source == "nvml"
    row = doctor.check_gpu(gpus, source)
    assert row.status == doctor.OK and "NVIDIA H100 80GB HBM3 (cc 9.0, hopper), driver 580.159.04 via nvml" == row.found


def test_real_pynvml_answers_or_says_why(monkeypatch):
    """The real nvidia-ml-py (a dev dependency): on CI there is no NVIDIA driver, which must
    come back as a reason, never an exception."""
    pytest.importorskip("pynvml")
    monkeypatch.delenv("PARITY_NO_NVML", raising=False)
    gpus, why = nvidia_smi.nvml_gpus()
    if shutil.which("nvidia-smi") is None:
        assert gpus is None and why.startswith("NVML: "), why
    else:
        assert gpus and why == "nvml"


def test_a_box_without_the_library_gets_pynvmls_reason_without_its_import():
    """Without libnvidia-ml, the reason is the one pynvml's nvmlInit gives, and pynvml (~10 ms
    of a start) is not imported to learn it; with the library, pynvml answers as before."""
    pytest.importorskip("pynvml")
    probe = (
        "import sys, json; from parity.gpu import nvidia_smi as n; gpus, why = n.nvml_gpus(); "
        "print(json.dumps([n._has_nvml_library(), why, 'pynvml' in sys.modules]))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PARITY_NO_NVML"}
    has_lib, why, imported = json.loads(subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True).stdout)
    if has_lib:
        assert imported and why != f"NVML: {nvidia_smi.NO_LIBRARY}", why
        return
    assert (why, imported) == (f"NVML: {nvidia_smi.NO_LIBRARY}", False)
    import pynvml

    with pytest.raises(pynvml.NVMLError) as e:
        pynvml.nvmlInit()
    assert str(e.value) == nvidia_smi.NO_LIBRARY
