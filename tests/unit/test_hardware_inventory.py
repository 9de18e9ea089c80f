"""hardware.inventory / write_hardware through the Runner, with the fake nvidia-smi on PATH."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from parity.gpu.hardware import inventory, write_hardware
from parity.runners.local import LocalRunner

FAKES = Path(__file__).resolve().parent.parent / "fakes" / "bin"


@pytest.fixture
def fake_path(monkeypatch):
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PARITY_NO_NVML", "1")
    return monkeypatch


def test_h100_inventory(fake_path):
    fake_path.setenv("FAKE_NVIDIA_SMI", "h100-idle")
    info = inventory(LocalRunner())
    assert info["hardware_class"] == "hopper"
    assert info["gpus"][0]["memory_mib"] == 81559 and info["cuda_version"] == "13.0" and info["driver"] == "580.159.04"
    assert info["cpu"]["source"] == "lscpu" and info["cpu"]["cpus"] >= 1


def test_gb10_inventory_unified_memory(fake_path):
    fake_path.setenv("FAKE_NVIDIA_SMI", "gb10-busy")
    info = inventory(LocalRunner())
    g = info["gpus"][0]
    assert info["hardware_class"] == "gb10_or_workstation_blackwell"
    assert g["memory_mib"] is None and g["unified_memory"] and "[N/A]" in g["memory"]
    assert info["system_memory_mib"] and info["system_memory_mib"] > 0


def test_driver_failure_is_cpu_only_with_reason(fake_path):
    fake_path.setenv("FAKE_NVIDIA_SMI", "nodriver")
    info = inventory(LocalRunner())
    assert info["hardware_class"] == "cpu_only" and info["gpus"] == []
    assert "exit 9" in info["source"] and "couldn't communicate" in info["source"]


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has a real nvidia-smi")
def test_this_machine_is_cpu_only():
    info = inventory(LocalRunner())
    assert info["hardware_class"] == "cpu_only" and info["source"] == "nvidia-smi not found"


def test_write_hardware_into_run_dir(fake_path, tmp_path):
    from parity.artifacts import RunDir
    from parity.config import load_profile
    from parity.ui import Output

    fake_path.setenv("FAKE_NVIDIA_SMI", "h100-idle")
    prof = load_profile("gb10-qwen36")  # expects gb10_or_workstation_blackwell: an H100 is flagged
    rd = RunDir.create(tmp_path, "hw", argv=["test"], config=prof, kind="test", host="local")
    warnings = []
    out = Output(json_mode=True)
    out.warn = warnings.append
    info = write_hardware(LocalRunner(), out, rd, prof.hardware_class)
    assert (rd.path / "hardware.txt").read_text().startswith("hardware_class=hopper\n")
    assert json.loads((rd.path / "hardware.json").read_text())["gpus"][0]["compute_cap"] == "9.0"
    assert info["hardware_class"] == "hopper" and warnings and "expects gb10_or_workstation_blackwell" in warnings[0]


def test_servers_that_would_see_every_gpu_of_a_multi_gpu_host_are_warned_of(fake_path):
    """On a two-GPU host a server started without CUDA_VISIBLE_DEVICES sees both, and llama.cpp
    splits the model's layers over them: a run meant for one GPU measures two.  Said once, at the
    inventory; not for one GPU, a crossover (it places each server), a remote host (its env is its
    own), or where CUDA_VISIBLE_DEVICES is set here or in an engine's env."""
    from types import SimpleNamespace

    from parity.config import load_profile
    from parity.gpu.hardware import every_gpu_seen
    from parity.session import spread_over_gpus

    one = inventory(LocalRunner())
    two = {**one, "gpus": [one["gpus"][0], {**one["gpus"][0], "index": 1}]}
    assert every_gpu_seen(one, False, True, None, []) is None
    said = every_gpu_seen(two, False, True, None, [])
    assert said.startswith("2 GPUs here and CUDA_VISIBLE_DEVICES is not set: every server sees all 2")
    assert [every_gpu_seen(two, *a) for a in [(True, True, None, []), (False, False, None, []), (False, True, "0", []),
                                                 (False, True, None, ["stock"])]] == [None] * 4
    fake_path.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    ctx = SimpleNamespace(profile=load_profile("campaigns/profiles/h200-ttft.yaml"), runner=LocalRunner())
    assert spread_over_gpus(ctx, ["stock_b", "stock"], two, placed=False) == said  # CUDA builds
    assert spread_over_gpus(ctx, ["stock_b", "stock"], two, placed=True) is None
    assert spread_over_gpus(SimpleNamespace(profile=load_profile("smoke"), runner=LocalRunner()), ["stock"], two, placed=False) is None  # CPU
    fake_path.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert spread_over_gpus(ctx, ["stock"], two, placed=False) is None
