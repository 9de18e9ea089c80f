"""`parity doctor --json` through the real CLI, on this machine and with tools taken away."""

from __future__ import annotations

import json
import os
import stat

from tests.conftest import DATA, run_parity

HW = DATA / "hw"
ROWS = ["python", "gguf", "paramiko", "nvidia-ml-py", "cmake", "ninja", "compilers", "nvcc", "gpu", "nsys", "vllm", "docker", "ssh", "sshd"]


def _doctor(env=None):
    r = run_parity("doctor", "--json", env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    return {c["name"]: c for c in doc["checks"]}, doc["summary"]


def test_doctor_json_has_every_capability():
    rows, summary = _doctor()
    assert list(rows) == ROWS
    assert sum(summary.values()) == len(ROWS)
    for c in rows.values():
        assert c["status"] in ("ok", "missing", "degraded")
        assert (c["consequence"] == "") == (c["status"] == "ok"), c
    assert rows["python"]["status"] == "ok"


def test_empty_path_makes_build_tools_missing(tmp_path):
    rows, _ = _doctor({"PATH": str(tmp_path), "PARITY_NO_NVML": "1"})
    for name in ("cmake", "ninja", "compilers", "nvcc", "gpu", "nsys", "docker", "ssh"):
        assert rows[name]["status"] == "missing", rows[name]
        assert rows[name]["consequence"], rows[name]
    assert "cannot build llama.cpp" in rows["cmake"]["consequence"]
    assert "--host" in rows["ssh"]["consequence"]
    # the default profile's vLLM is `vllm_bin: auto`: the cached venv, not PATH (tests/integration/test_vllm_real.py)
    assert "vllm_bin: auto" in rows["vllm"]["found"]


def test_gpu_row_from_nvidia_smi(tmp_path):
    """nvidia-smi cannot run here: a stand-in replays output captured on the H100 machine."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\n"
        f'case "$1" in --query-gpu=*) cat {HW}/nvidia-smi-query-gpu-h100.csv ;; "") cat {HW}/nvidia-smi-h100.txt ;; *) exit 2 ;; esac\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    rows, _ = _doctor({"PATH": f"{bin_dir}:{os.environ['PATH']}", "PARITY_NO_NVML": "1"})
    gpu = rows["gpu"]
    assert gpu["status"] == "ok"
    assert "NVIDIA H100 80GB HBM3 (cc 9.0, hopper), driver 580.159.04" in gpu["found"] and gpu["found"].endswith("via nvidia-smi")
