"""doctor's parsers on captured tool output, and its rows for present / missing / degraded."""

from __future__ import annotations

import pytest

from parity import doctor
from parity.config import load_profile, profile_from_dict
from parity.runners.local import LocalRunner
from tests.conftest import DATA

D = DATA / "doctor"


def test_parsers_on_captured_output():
    assert doctor.parse_nvcc_version((D / "nvcc-version-13.0.txt").read_text()) == "13.0.88"
    archs = doctor.parse_gpu_archs((D / "nvcc-list-gpu-arch-13.0.txt").read_text())
    assert archs[:3] == ["75", "80", "86"] and "90" in archs and "121" in archs and len(archs) == 12
    assert doctor.parse_version((D / "cmake-version.txt").read_text()) == "3.25.1"
    assert doctor.parse_version((D / "ninja-version.txt").read_text()) == "1.11.1"
    assert doctor.parse_version((D / "gcc-version.txt").read_text().splitlines()[0]) == "12.2.0"
    assert doctor.parse_version((D / "gxx-version.txt").read_text().splitlines()[0]) == "12.2.0"
    assert doctor.parse_openssh_version((D / "ssh-V.txt").read_text()) == "9.2p1"
    assert doctor.parse_openssh_version((D / "sshd-V.txt").read_text()) == "9.2"
    assert doctor.parse_gpu_archs("nvcc fatal : Unknown option '--list-gpu-arch'\n") == []
    assert doctor.parse_version("no version here") is None


def test_wanted_archs():
    assert doctor.wanted_archs("90;121a") == ["90", "121"]
    assert doctor.wanted_archs("90-real; 100-virtual") == ["90", "100"]


class HidingRunner(LocalRunner):
    """The real local runner with some tools taken off PATH."""

    def __init__(self, hidden):
        self.hidden = set(hidden)

    def which(self, name):
        return None if name in self.hidden else super().which(name)


@pytest.mark.parametrize("tool, check", [("cmake", doctor.check_cmake), ("nvcc", doctor.check_nvcc), ("c++", doctor.check_compilers)])
def test_missing_tool_row_says_what_breaks(tool, check):
    row = check(HidingRunner({tool}))
    assert row.status == doctor.MISSING
    assert "cannot build" in row.consequence or "CPU builds only" in row.consequence


def test_nvcc_row_flags_archs_it_cannot_compile():
    runner = LocalRunner()
    if not runner.which("nvcc"):
        pytest.skip("no nvcc on this machine")
    prof = profile_from_dict(
        {"sources": {"s": {"kind": "path", "path": "/x"}}, "engines": {"gpu": {"source": "s", "cuda_archs": "90;99"}}}, "t"
    )
    row = doctor.check_nvcc(runner, prof, gpu_cc="9.0")
    assert row.status == doctor.DEGRADED and "engine gpu wants sm_99" in row.consequence
    assert "sm_90" not in row.consequence
    assert doctor.check_nvcc(runner, load_profile("smoke"), gpu_cc="9.0").status == doctor.OK
    assert "the GPU is sm_37" in doctor.check_nvcc(runner, None, gpu_cc="3.7").consequence


def test_gpu_rows():
    ok = doctor.check_gpu([{"name": "NVIDIA H100 80GB HBM3", "driver": "580.159.04", "compute_cap": "9.0"}], "nvml")
    assert ok.status == doctor.OK and "hopper" in ok.found and "580.159.04" in ok.found
    missing = doctor.check_gpu([], "NVML: NVML Shared Library Not Found; nvidia-smi not found")
    assert missing.status == doctor.MISSING and "CPU" in missing.consequence
    old_driver = doctor.check_gpu([{"name": "Tesla V100", "driver": "470.82", "compute_cap": None}], "nvidia-smi")
    assert "cc ?, unknown_gpu" in old_driver.found and "cpu_only" not in old_driver.found


def test_report_counts():
    rows = [doctor.Check("a", doctor.OK, "x"), doctor.Check("b", doctor.MISSING, "y", "z"), doctor.Check("c", doctor.DEGRADED, "y", "z")]
    assert doctor.report(rows)["summary"] == {"ok": 1, "degraded": 1, "missing": 1}
