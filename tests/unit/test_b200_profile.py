"""The datacenter-Blackwell rerun (seed 000's "B200 rerun checklist"): the embedded b200-qwen36
profile and campaigns/b200-qwen36.yaml -- listed, holding the checklist's shape, and planned by
their dry runs (a NO GO that names what this box lacks, never an option error)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from parity.config import available_profiles, load_profile

ROOT = Path(__file__).resolve().parents[2]
FAKES = ROOT / "tests" / "fakes" / "bin"


def test_listed_and_extending_gb10_the_checklists_way(parity_cli):
    assert "b200-qwen36" in available_profiles()
    r = parity_cli("config", "list")
    assert r.returncode == 0 and "b200-qwen36" in r.stdout.split()
    p, gb10 = load_profile("b200-qwen36"), load_profile("gb10-qwen36")
    assert p.hardware_class == "datacenter_blackwell" and gb10.hardware_class == "gb10_or_workstation_blackwell"
    assert (p.engines["paged"].cuda_archs, p.engines["stock"].cuda_archs, p.engines["paged-100a"].cuda_archs) == (
        "100",
        "100",
        "100a",
    )
    assert p.engines["paged"].series == "auto" and p.engines["stock"].series is None
    s = p.serving  # checklist 4
    assert (s.npl, s.ptok, s.gen, s.parallel, s.ctx, s.engines) == (
        [8, 32, 128],
        128,
        64,
        128,
        131072,
        ["paged", "vllm"],
    )
    v = p.engines["vllm"]  # B200-specific vLLM sizing
    assert (v.gpu_memory_utilization, v.tensor_parallel_size) == (0.90, 1) and v.max_num_seqs >= max(s.npl)
    md5s = {(m, c.path): c.md5[:8] for m in ("moe", "dense") for c in p.models[m].canonical}  # checklist 5
    assert md5s[("moe", "paged")] == "8cb0ce23" and md5s[("dense", "paged")] == "5951a5b4"
    assert {"MUL_MAT", "MUL_MAT_ID"} <= set(p.gates.ops) and p.gates.kl.on_md5_change == ["paged"]
    assert p.models["moe"].vllm_path.endswith("q36-35b-a3b-nvfp4-vllm/")  # checklist 3: both model forms


def test_the_snapshot_dry_run_plans_the_rerun(parity_cli, tmp_path):
    r = parity_cli(
        "snapshot", "-p", "b200-qwen36", "--dry-run", "--json", env={"PARITY_ARTIFACTS": str(tmp_path / "runs")}
    )
    assert r.returncode == 2 and "NO GO:" in r.stderr and "q36-35b-a3b-nvfp4.gguf" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    doc = json.loads(r.stdout)
    cmds = {c["engine"]: c for c in doc["commands"]}
    assert list(cmds) == ["paged", "vllm"] and doc["npl"] == [8, 32, 128]
    argv = cmds["paged"]["argv"]
    assert argv[argv.index("-c") + 1] == "131072" and argv[argv.index("--parallel") + 1] == "128"
    assert cmds["paged"]["reads_log"].startswith("banner: ARCHS = 1000 (cuda_archs 100); no BLACKWELL_NATIVE_FP4")
    assert "kernel path: native FP4 or the Marlin fallback" in cmds["vllm"]["reads_log"]
    assert cmds["vllm"]["argv"][cmds["vllm"]["argv"].index("--gpu-memory-utilization") + 1] == "0.9"


def test_the_campaign_plans_every_checklist_step(parity_cli, tmp_path):
    """On a box with a GPU (the fake nvidia-smi) the plan lists every step and the go / no-go names
    the missing models and binaries; with no GPU the profile steps refuse in one line."""
    env = {
        "PARITY_ARTIFACTS": str(tmp_path / "runs"),
        "PATH": f"{FAKES}{os.pathsep}{os.environ['PATH']}",
        "PARITY_NO_NVML": "1",
        "FAKE_NVIDIA_SMI": "h100-idle",
        "FAKE_DOCKER": "none",
    }
    r = parity_cli("campaign", "run", "campaigns/b200-qwen36.yaml", "--dry-run", env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    for step in (
        "build (build)",
        "pre-gates (gate)",
        "snapshot (snapshot)",
        "post-gates (gate)",
        "profile-paged (profile)",
        "profile-vllm (profile)",
        "report (report)",
    ):
        assert step in r.stdout + r.stderr, step
    assert "NO GO" in r.stderr and "q36-27b-nvfp4.gguf does not exist" in r.stderr
    bare = parity_cli(
        "campaign",
        "run",
        "campaigns/b200-qwen36.yaml",
        "--dry-run",
        env={"PARITY_ARTIFACTS": str(tmp_path / "runs2"), "PATH": "/usr/bin:/bin", "PARITY_NO_NVML": "1"},
    )
    if not Path("/dev/nvidia0").exists():
        assert (
            bare.returncode == 2 and "step profile-paged (profile): kernel tracing needs a CUDA device" in bare.stderr
        )
