"""Idle preflight (fake nvidia-smi / docker on PATH), the wait rule, held_lock and the campaign step."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import shared_or_skip
from parity.session import lock_step, locked

import parity.gpu.lock as L
from parity.config import LockConfig, load_profile
from parity.errors import InfraError
from parity.gpu.preflight import preflight
from parity.runners.local import LocalRunner
from parity.ui import Output

TESTS = Path(__file__).resolve().parent.parent
FAKES = TESTS / "fakes" / "bin"
REPO = TESTS.parent


@pytest.fixture
def fakes(monkeypatch):
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PARITY_NO_NVML", "1")
    return monkeypatch


def only_docker_path(tmp_path, monkeypatch):
    """A PATH where docker is the fake and nvidia-smi does not exist."""
    b = tmp_path / "bin"
    b.mkdir()
    (b / "docker").symlink_to(FAKES / "docker")
    monkeypatch.setenv("PATH", f"{b}{os.pathsep}/usr/bin{os.pathsep}/bin")


def test_idle(fakes):
    fakes.setenv("FAKE_NVIDIA_SMI", "h100-idle")
    fakes.setenv("FAKE_DOCKER", "none")
    pf = preflight(LocalRunner(), LockConfig())
    assert pf["idle"] and "0 compute process(es) via nvidia-smi" in pf["gpu"] and "no running containers" in pf["docker"]


def test_gpu_busy_names_the_process(fakes):
    fakes.setenv("FAKE_NVIDIA_SMI", "h100-busy")
    fakes.setenv("FAKE_DOCKER", "none")
    pf = preflight(LocalRunner(), LockConfig())
    assert not pf["idle"] and not pf["gpu_idle"] and "437 ./busy_app" in pf["gpu"]
    relaxed = preflight(LocalRunner(), LockConfig(require_idle_gpu=False))
    assert relaxed["idle"] and "ignored" in relaxed["gpu"]


@pytest.mark.parametrize(
    "mode,only,idle",
    [("busy", "local-ai-worker", False), ("other", "local-ai-worker", True), ("other", None, False), ("none", None, True)],
)
def test_docker_busy_only_matching_is_a_relaxation(fakes, mode, only, idle):
    fakes.setenv("FAKE_DOCKER", mode)
    pf = preflight(LocalRunner(), LockConfig(docker_busy_only_matching=only))
    assert pf["docker_idle"] is idle
    if only and mode == "other":
        assert "ignored by lock.docker_busy_only_matching: srv_redis_1" in pf["docker"]


USERS_GATES = REPO.parent / "shared" / "localai-paged" / "paged-inference-gates.sh"


def users_check_idle(tmp_path) -> subprocess.CompletedProcess:
    """The users' own check_idle function, cut from their gate script and run with the fakes on PATH."""
    script = f"source <(sed -n '/^check_idle()/,/^}}/p' {USERS_GATES}); check_idle && echo idle"
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env={**os.environ, "HOME": str(tmp_path)}, timeout=60)


@pytest.mark.parametrize("mode", ["other", "busy", "none"])
def test_any_container_is_busy_as_in_the_users_harness(fakes, tmp_path, mode):
    """A redis container alone: the users' harness says busy, so parity's gb10-qwen36 profile must too."""
    fakes.setenv("FAKE_DOCKER", mode)
    fakes.setenv("FAKE_NVIDIA_SMI", "gb10-idle")
    ids = subprocess.run(["sh", "-c", "docker ps -q | wc -l"], capture_output=True, text=True, timeout=60).stdout.strip()
    theirs_busy = ids != "0"  # their preflight line: [[ "$docker_count" == "0" ]]
    ours = preflight(LocalRunner(), load_profile("gb10-qwen36").lock)
    assert ours["docker_idle"] is not theirs_busy and ours["idle"] is not theirs_busy
    assert theirs_busy is (mode != "none")
    if mode == "other":
        assert ours["docker"] == "busy: srv_redis_1"
    shared_or_skip("localai-paged/paged-inference-gates.sh")  # compared with their rule only where their script is missing
    r = users_check_idle(tmp_path)
    assert (r.returncode == 3) is theirs_busy and ("idle" in r.stdout) is not theirs_busy, r.stderr
    if theirs_busy:
        assert f"docker containers are running: {ids}" in r.stderr


def test_old_docker_filter_key_says_it_was_renamed(tmp_path):
    from parity.errors import ConfigError

    f = tmp_path / "p.yaml"
    f.write_text("extends: gb10-qwen36\nlock: {docker_filter: local-ai-worker}\n")
    with pytest.raises(ConfigError, match="lock.docker_filter: renamed to docker_busy_only_matching: by default ANY running container"):
        load_profile(str(f))


@pytest.mark.parametrize("policy", ["idle", "busy"])
def test_docker_without_daemon_follows_policy(fakes, policy):
    fakes.setenv("FAKE_DOCKER", "nodaemon")
    pf = preflight(LocalRunner(), LockConfig(docker_no_daemon=policy))
    assert pf["docker_idle"] is (policy == "idle")
    assert "no daemon" in pf["docker"] and f"counted as {policy}" in pf["docker"]


@pytest.mark.parametrize("policy", ["idle", "busy"])
def test_missing_nvidia_smi_follows_policy(tmp_path, monkeypatch, policy):
    only_docker_path(tmp_path, monkeypatch)
    monkeypatch.setenv("PARITY_NO_NVML", "1")
    pf = preflight(LocalRunner(), LockConfig(nvidia_smi_missing=policy))
    assert pf["gpu_idle"] is (policy == "idle") and "nvidia-smi not found" in pf["gpu"]


def test_broken_driver_is_reported_not_a_crash(fakes):
    fakes.setenv("FAKE_NVIDIA_SMI", "nodriver")
    pf = preflight(LocalRunner(), LockConfig(nvidia_smi_missing="busy"))
    assert not pf["gpu_idle"] and "exit 9" in pf["gpu"]


@pytest.mark.skipif(subprocess.run(["sh", "-c", "command -v docker && ! docker ps"], capture_output=True).returncode != 0, reason="needs a docker client without a daemon (as on the CI machine)")
def test_real_docker_client_without_daemon(monkeypatch):
    monkeypatch.setenv("PARITY_NO_NVML", "1")
    pf = preflight(LocalRunner(), LockConfig(docker_no_daemon="busy"))
    assert not pf["docker_idle"] and "Cannot connect to the Docker daemon" in pf["docker"]


def test_wait_needs_consecutive_idle_checks(tmp_path, monkeypatch):
    seq = iter([True, False, True, True, True])
    calls = []

    def scripted(runner, cfg):
        calls.append(1)
        idle = next(seq)
        return {"idle": idle, "gpu_idle": idle, "gpu": "scripted", "docker_idle": True, "docker": "scripted"}

    monkeypatch.setattr(L, "preflight", scripted)
    lk = L.GpuLock(LockConfig(poll_s=0.01, idle_checks=2), str(tmp_path / "lk"))
    L.wait_and_acquire(lk, LocalRunner(), Output(json_mode=True))
    assert lk.held and len(calls) == 4  # idle, busy (reset), idle, idle -> taken
    lk.release()


def test_wait_timeout_is_infra_error_and_takes_nothing(fakes, tmp_path):
    fakes.setenv("FAKE_NVIDIA_SMI", "h100-busy")
    lk = L.GpuLock(LockConfig(poll_s=0.05, idle_checks=2), str(tmp_path / "lk"))
    with pytest.raises(InfraError, match="not acquired within .*437"):
        L.wait_and_acquire(lk, LocalRunner(), Output(json_mode=True), timeout=0.3)
    assert not lk.held and not (tmp_path / "lk").exists()


def _ctx(tmp_path, profile_file="fast-nopreflight.yaml"):
    from parity.context import Context

    prof = load_profile(str(TESTS / "data" / "lock" / profile_file))
    prof.lock.dir = str(tmp_path / "gpu_bench_lock")
    return Context(profile=prof, runner=LocalRunner(), out=Output(json_mode=True), artifacts_root=tmp_path / "runs")


def test_session_lock_reentrant_and_released_on_error(tmp_path):
    ctx = _ctx(tmp_path)
    ctx.run_id = "20260101_000000_test"
    owner = tmp_path / "gpu_bench_lock" / "owner"
    with pytest.raises(RuntimeError):
        with locked(ctx) as outer:
            assert "run=20260101_000000_test" in owner.read_text()
            with locked(ctx) as inner:
                assert inner is outer
            assert owner.read_text().strip() == outer.record  # inner exit did not release
            raise RuntimeError("boom")
    assert owner.read_text().startswith("FREE released-by-")
    assert "_gpu_lock" not in ctx.vars and L.ENV_HELD not in os.environ


def test_campaign_step_holds_until_session_ends(tmp_path):
    from parity.context import run_session

    ctx = _ctx(tmp_path)
    owner = tmp_path / "gpu_bench_lock" / "owner"
    with run_session(ctx, "campaign", "locktest", argv=["test"]) as rd:
        res = lock_step(ctx, {"timeout_s": 30})
        assert res["owner"].split()[0] == L.whoami() and f"run={rd.run_id}" in owner.read_text()
        assert (rd.path / "lock.json").exists()
        # a child `parity lock run` inherits the lock instead of waiting on it
        child = subprocess.run(
            [sys.executable, "-m", "parity", "lock", "run", "--profile", str(TESTS / "data/lock/fast-nopreflight.yaml"), "--lock-dir", str(tmp_path / "gpu_bench_lock"), "--timeout", "2", "--", "true"],
            capture_output=True, text=True, cwd=REPO, timeout=60,
        )
        assert child.returncode == 0, child.stderr
        assert "inherited" in child.stdout + child.stderr
        assert owner.read_text().strip() == res["owner"]  # the child did not release it
    assert owner.read_text().startswith("FREE")


def test_campaign_step_rejects_unknown_option(tmp_path):
    from parity.errors import UsageError

    with pytest.raises(UsageError, match="unknown lock option"):
        lock_step(_ctx(tmp_path), {"timeot_s": 1})
