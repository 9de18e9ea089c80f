"""A dry run is a go/no-go (as the users' DRY_RUN=1): it records hardware.txt and exits non-zero,
naming the reason, when the real run could not start: 4 for a busy GPU, a held lock, a running
container or a taken port; 2 for a missing path.  Fakes: tests/fakes/bin (nvidia-smi, docker, nsys)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FAKES = REPO / "tests" / "fakes" / "bin"


@pytest.fixture
def setup(tmp_path):
    lock = tmp_path / "gpu_bench_lock"
    prof = tmp_path / "p.yaml"
    prof.write_text(
        "extends: smoke\n"
        f"lock: {{dir: {lock}, docker_no_daemon: idle, nvidia_smi_missing: idle}}\n"
        "models:\n  gone: {path: /nonexistent/q36-35b-a3b-nvfp4.gguf, arch: qwen35moe}\n"
    )
    camp = tmp_path / "camp.yaml"
    camp.write_text("name: go\nsteps:\n  - {name: lock, kind: lock}\n  - {name: pre, kind: gate, with: {phase: pre, models: [tiny], ops: [RMS_NORM], backend: CPU}}\n")
    return prof, lock, camp, tmp_path / "runs"


def parity(*args, runs, **env):
    e = dict(os.environ, PATH=f"{FAKES}{os.pathsep}{os.environ['PATH']}", PARITY_NO_NVML="1", PARITY_ARTIFACTS=str(runs), **env)
    e.pop("PARITY_GPU_LOCK", None)
    return subprocess.run([sys.executable, "-m", "parity", *args], capture_output=True, text=True, cwd=REPO, env=e, timeout=300, stdin=subprocess.DEVNULL)


def profile_dry(prof, runs, model="tiny", **env):
    return parity("profile", "--dry-run", "--graph-node", "--model", model, "-p", str(prof), "--json", runs=runs, **env)


def the_run(runs: Path) -> Path:
    (run,) = runs.iterdir()
    return run


def test_go_records_the_hardware_and_exits_0(setup):
    prof, _, _, runs = setup
    r = profile_dry(prof, runs, FAKE_NVIDIA_SMI="gb10-idle", FAKE_DOCKER="none")
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc["go_no_go"]["go"] is True and doc["go_no_go"]["reasons"] == []
    run = the_run(runs)
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "dry-run" and m["dry_run"] is True and m["go_no_go"]["go"] is True and str(run) == doc["run_dir"]
    assert "hardware_class=gb10_or_workstation_blackwell" in (run / "hardware.txt").read_text()
    assert (run / "preflight.txt").read_text() == "docker=0\nlocal_ai_worker=0\ncompute=0\nFREE-no-lock-file\n"  # the users' four lines
    assert json.loads((run / "plan.json").read_text())["commands"][0]["argv"][1] == "profile"


def test_busy_gpu_is_no_go_naming_the_process(setup):
    prof, _, _, runs = setup
    r = profile_dry(prof, runs, FAKE_NVIDIA_SMI="gb10-busy", FAKE_DOCKER="none")
    assert r.returncode == 4, r.stderr
    assert "NO GO: GPU busy: 1 compute process(es) via nvidia-smi: 114687 /usr/local/bin/python" in r.stderr
    run = the_run(runs)
    assert (run / "hardware.txt").is_file() and json.loads((run / "manifest.json").read_text())["status"] == "dry-run"
    assert (run / "preflight.txt").read_text().splitlines()[2] == "compute=1"


def test_held_lock_is_no_go_naming_the_holder(setup):
    prof, lock, _, runs = setup
    lock.mkdir()
    (lock / "owner").write_text(f"mudler@promaxgb10 {int(time.time()) - 60} pid=4242 run=20260701_051757_snapshot\n")
    r = profile_dry(prof, runs, FAKE_NVIDIA_SMI="gb10-idle", FAKE_DOCKER="none")
    assert r.returncode == 4, r.stderr
    assert f"NO GO: GPU lock {lock} held by mudler@promaxgb10" in r.stderr and "run 20260701_051757_snapshot" in r.stderr
    assert (the_run(runs) / "preflight.txt").read_text().splitlines()[3].startswith("mudler@promaxgb10 ")


def test_missing_model_is_no_go_exit_2(setup):
    prof, _, _, runs = setup
    r = profile_dry(prof, runs, model="gone", FAKE_NVIDIA_SMI="gb10-idle", FAKE_DOCKER="none")
    assert r.returncode == 2, r.stderr
    assert "NO GO: model gone: /nonexistent/q36-35b-a3b-nvfp4.gguf does not exist" in r.stderr
    assert (the_run(runs) / "hardware.txt").is_file()


def test_campaign_dry_run_with_a_redis_container_is_no_go(setup):
    prof, _, camp, runs = setup
    r = parity("campaign", "run", str(camp), "--dry-run", "-p", str(prof), "--json", runs=runs, FAKE_NVIDIA_SMI="gb10-idle", FAKE_DOCKER="other")
    assert r.returncode == 4, r.stderr
    assert "NO GO: docker busy: busy: srv_redis_1" in r.stderr
    doc = json.loads(r.stdout)
    assert [s["name"] for s in doc["steps"]] == ["lock", "pre"] and doc["go_no_go"]["go"] is False
    run = the_run(runs)
    assert json.loads((run / "manifest.json").read_text())["status"] == "dry-run" and (run / "hardware.txt").is_file()
    ok = parity("campaign", "run", str(camp), "--dry-run", "-p", str(prof), "--json", runs=runs, FAKE_NVIDIA_SMI="gb10-idle", FAKE_DOCKER="none")
    assert ok.returncode == 0, ok.stderr


def test_campaign_dry_run_missing_model(setup, tmp_path):
    prof, _, _, runs = setup
    camp = tmp_path / "gone.yaml"
    camp.write_text("name: gone\nsteps:\n  - {name: pre, kind: gate, with: {phase: pre, models: [gone]}}\n")
    r = parity("campaign", "run", str(camp), "--dry-run", "-p", str(prof), runs=runs, FAKE_NVIDIA_SMI="gb10-idle", FAKE_DOCKER="none")
    assert r.returncode == 2 and "model gone: /nonexistent/q36-35b-a3b-nvfp4.gguf does not exist" in r.stderr, r.stderr


@pytest.mark.parametrize("command", ["snapshot", "profile"])
def test_dry_run_names_the_lock_the_run_would_take(setup, tmp_path, command):
    """PARITY_LOCK_DIR (what --host sets from hosts.NAME.lock_dir) wins over the profile's
    lock.dir in the run and in `lock status`: the dry run names that one too, and a holder
    there is what makes it a no-go."""
    prof, profile_lock, _, runs = setup
    other = tmp_path / "host_lock"
    args = ["snapshot", "--dry-run", "--npl", "1", "--engines", "paged,stock", "-p", str(prof), "--json"] if command == "snapshot" else ["profile", "--dry-run", "--graph-node", "--model", "tiny", "-p", str(prof), "--json"]
    r = parity(*args, runs=runs, PARITY_LOCK_DIR=str(other), FAKE_NVIDIA_SMI="gb10-idle", FAKE_DOCKER="none")
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["lock_dir"] == str(other)
    status = parity("lock", "status", "-p", str(prof), "--json", runs=runs, PARITY_LOCK_DIR=str(other))
    assert str(other) in status.stdout and str(profile_lock) not in status.stdout
    other.mkdir()
    (other / "owner").write_text(f"someone@box {int(time.time()) - 60} pid=4242 run=x\n")
    held = parity(*args, runs=runs, PARITY_LOCK_DIR=str(other), FAKE_NVIDIA_SMI="gb10-idle", FAKE_DOCKER="none")
    assert held.returncode == 4 and str(other) in held.stderr
