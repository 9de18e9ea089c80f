"""nvidia-smi / docker / lscpu parsers on captured output (tests/data/hw/README.md says where each came from)."""

from __future__ import annotations

from pathlib import Path

import pytest

from parity.gpu import docker, nvidia_smi
from parity.gpu.hardware import classify, parse_cpuinfo, parse_lscpu, parse_meminfo_mib, render

HW = Path(__file__).resolve().parent.parent / "data" / "hw"


def text(name: str) -> str:
    return (HW / name).read_text()


def test_query_gpu_h100_real():
    (g,) = nvidia_smi.parse_query_gpu(text("nvidia-smi-query-gpu-h100.csv"))
    assert (g.name, g.driver, g.compute_cap, g.memory_mib) == ("NVIDIA H100 80GB HBM3", "580.159.04", "9.0", 81559)
    assert classify(g.compute_cap) == "hopper"


def test_query_gpu_with_header_line_is_skipped():
    rows = nvidia_smi.parse_query_gpu(text("nvidia-smi-query-gpu-h100-header.csv"), ("name", "driver_version", "compute_cap", "memory.total", "memory.used"))
    assert [(g.name, g.memory_mib) for g in rows] == [("NVIDIA H100 80GB HBM3", 81559)]


def test_query_gpu_lead_example_and_gb10_na():
    (h,) = nvidia_smi.parse_query_gpu("NVIDIA H100 80GB HBM3, 570.86.15, 9.0, 81559 MiB\n")
    assert (h.driver, h.compute_cap, h.memory_mib) == ("570.86.15", "9.0", 81559)
    (g,) = nvidia_smi.parse_query_gpu(text("nvidia-smi-query-gpu-gb10-doc.csv"))
    assert (g.name, g.compute_cap, g.memory_mib) == ("NVIDIA GB10", "12.1", None)
    assert classify(g.compute_cap) == "gb10_or_workstation_blackwell"


def test_query_gpu_name_with_comma():
    (g,) = nvidia_smi.parse_query_gpu("NVIDIA RTX PRO 6000, Workstation, 580.1, 12.0, 97887 MiB\n")
    assert (g.name, g.driver, g.compute_cap, g.memory_mib) == ("NVIDIA RTX PRO 6000, Workstation", "580.1", "12.0", 97887)


def test_query_gpu_error_text_gives_no_gpu():
    assert nvidia_smi.parse_query_gpu(text("nvidia-smi-invalid-field.txt")) == []


def test_cuda_version_from_banners():
    assert nvidia_smi.parse_cuda_version(text("nvidia-smi-h100.txt")) == "13.0"
    assert nvidia_smi.parse_cuda_version(text("nvidia-smi-gb10-doc.txt")) == "13.0"
    assert nvidia_smi.parse_cuda_version("no banner here") is None


def test_compute_apps_idle_busy_and_pid_only():
    assert nvidia_smi.parse_compute_apps(text("nvidia-smi-compute-apps-h100-idle.csv")) == []
    assert nvidia_smi.parse_compute_apps(text("nvidia-smi-compute-apps-h100-busy.csv")) == [{"pid": 437, "name": "./busy_app", "memory_mib": 1542}]
    assert nvidia_smi.parse_compute_apps(text("nvidia-smi-compute-apps-pid-h100-busy.csv")) == [{"pid": 437, "name": "", "memory_mib": None}]
    assert nvidia_smi.parse_compute_apps(text("nvidia-smi-compute-apps-gb10-busy-doc.csv"))[0]["pid"] == 114687
    assert nvidia_smi.parse_compute_apps("No running processes found\n") == []
    assert nvidia_smi.parse_compute_apps("5, python, [N/A]\n") == [{"pid": 5, "name": "python", "memory_mib": None}]


@pytest.mark.parametrize(
    "cc,cls",
    [
        ("12.1", "gb10_or_workstation_blackwell"),
        ("12.0", "gb10_or_workstation_blackwell"),
        ("10.0", "datacenter_blackwell"),
        ("10.3", "datacenter_blackwell"),
        ("9.0", "hopper"),
        ("8.9", "ada"),
        ("8.6", "ampere"),
        ("8.0", "ampere"),
        ("7.5", "turing"),
        ("7.0", "volta"),
        ("6.1", "unknown_sm_61"),
        (None, "unknown_gpu"),  # a GPU whose driver predates the compute_cap field
        ("", "unknown_gpu"),
        ("garbage", "unknown_gpu"),
    ],
)
def test_classify(cc, cls):
    assert classify(cc) == cls


def test_docker_ps_no_daemon_captured_here():
    st = docker.parse_ps(int(text("docker-ps-no-daemon.rc")), text("docker-ps-no-daemon.stdout"), text("docker-ps-no-daemon.stderr"))
    assert st.state == "no-daemon" and "Cannot connect to the Docker daemon" in st.note and st.containers == []


def test_docker_ps_running_and_filter():
    st = docker.parse_ps(0, text("docker-ps-busy-doc.txt"), "")
    assert st.state == "ok" and st.containers == ["local-ai-worker-1", "srv_redis_1"]
    assert docker.matching(st, "local-ai-worker") == ["local-ai-worker-1"]
    assert docker.matching(st, "localai/") == ["local-ai-worker-1"]  # the image matches too
    assert docker.matching(st, None) == ["local-ai-worker-1", "srv_redis_1"]
    other = docker.parse_ps(0, text("docker-ps-other-doc.txt"), "")
    assert docker.matching(other, "local-ai-worker") == []
    assert docker.parse_ps(0, text("docker-ps-none.txt"), "").containers == []
    denied = docker.parse_ps(1, "", "permission denied while trying to connect to the Docker daemon socket at unix:///var/run/docker.sock: ...")
    assert denied.state == "no-access"


def test_lscpu_captured_here_and_on_device():
    here = parse_lscpu(text("lscpu-x86-kvm.txt"))
    assert here == {"model": "AMD EPYC", "cpus": 2, "arch": "x86_64", "vendor": "AuthenticAMD"}
    dev = parse_lscpu(text("lscpu-device-h100-head.txt"))
    assert (dev["model"], dev["cpus"]) == ("Intel(R) Xeon(R) Processor", 16)


def test_lscpu_heterogeneous_arm_lists_both_clusters():
    # lscpu prints one "Model name:" block per core type (GB10: 10x Cortex-X925 + 10x Cortex-A725)
    sample = "Architecture: aarch64\nCPU(s): 20\nVendor ID: ARM\nModel name: Cortex-X925\nModel name: Cortex-A725\n"
    assert parse_lscpu(sample)["model"] == "Cortex-X925 + Cortex-A725"


def test_cpuinfo_and_meminfo():
    assert parse_cpuinfo("processor\t: 0\nmodel name\t: AMD EPYC\nprocessor\t: 1\nmodel name\t: AMD EPYC\n") == {"model": "AMD EPYC", "cpus": 2, "arch": None, "vendor": None}
    assert parse_meminfo_mib("MemTotal:       131981020 kB\nMemFree: 1 kB\n") == 128887


def test_render_is_greppable():
    info = {
        "hardware_class": "gb10_or_workstation_blackwell",
        "host": "promaxgb10-4ad8",
        "gpus": [{"index": 0, "name": "NVIDIA GB10", "driver": "580.159.03", "compute_cap": "12.1", "memory": "unified (nvidia-smi reports [N/A])"}],
        "driver": "580.159.03",
        "cuda_version": "13.0",
        "cpu": {"model": "Cortex-X925 + Cortex-A725", "cpus": 20, "arch": "aarch64", "source": "lscpu"},
        "system_memory_mib": 122478,
        "source": "nvidia-smi",
    }
    txt = render(info)
    assert txt.splitlines()[0] == "hardware_class=gb10_or_workstation_blackwell"
    assert "gpu0=NVIDIA GB10, driver 580.159.03, compute capability 12.1, memory unified" in txt
