"""`parity lock ...` and `parity hw` as the users run them (real CLI processes)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent.parent
REPO = TESTS.parent
FAKES = TESTS / "fakes" / "bin"
FAST = str(TESTS / "data" / "lock" / "fast.yaml")
STRICT = str(TESTS / "data" / "lock" / "strict.yaml")


def cli(*args, fakes=True, **extra):
    env = dict(os.environ, PARITY_NO_NVML="1", **extra)
    env.pop("PARITY_GPU_LOCK", None)
    if fakes:
        env["PATH"] = f"{FAKES}{os.pathsep}{env['PATH']}"
    return subprocess.run([sys.executable, "-m", "parity", *args], cwd=REPO, capture_output=True, text=True, env=env, timeout=120)


def test_status_names_legacy_lock(tmp_path):
    d = tmp_path / "gpu_bench_lock"
    d.mkdir()
    r = cli("lock", "status", "--profile", FAST, "--lock-dir", str(d), "--json")
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["state"] == "legacy" and doc["legacy"] is True
    assert "legacy harness" in doc["description"] and doc["free_and_idle_now"] is False
    human = cli("lock", "status", "--profile", FAST, "--lock-dir", str(d))
    assert "held by a legacy harness" in human.stdout and "mkdir/rmdir" in human.stdout
    w = cli("lock", "wait", "--profile", FAST, "--lock-dir", str(d), "--timeout", "0.3")
    assert w.returncode == 4 and w.stderr.count("\n") == 1 and "not free and idle within" in w.stderr
    rel = cli("lock", "release", "--profile", FAST, "--lock-dir", str(d))
    assert rel.returncode == 2 and "rmdir" in rel.stderr
    assert list(d.iterdir()) == []


def test_status_plain_words_with_age(tmp_path):
    d = tmp_path / "lk"
    d.mkdir()
    (d / "owner").write_text(f"mudler@promaxgb10 {int(time.time()) - 600} pid=4242 run=20260701_051757_snapshot\n")
    r = cli("lock", "status", "--profile", FAST, "--lock-dir", str(d), FAKE_NVIDIA_SMI="h100-busy", FAKE_DOCKER="busy")
    assert r.returncode == 0, r.stderr
    # the age is 10 minutes plus however long a busy machine took to start parity
    assert re.search(r"held by mudler@promaxgb10 for 10m\d\ds \(pid 4242, run 20260701_051757_snapshot\)", r.stdout), r.stdout
    assert "another host (promaxgb10)" in r.stdout and "--break-stale" in r.stdout
    assert "1 compute process(es) via nvidia-smi: 437 ./busy_app" in r.stdout
    assert "busy: local-ai-worker-1, srv_redis_1" in r.stdout and "verdict: busy" in r.stdout


@pytest.mark.skipif(subprocess.run(["sh", "-c", "command -v docker && ! docker ps"], capture_output=True).returncode != 0, reason="needs a docker client without a daemon (as on the CI machine)")
def test_real_docker_without_daemon_per_policy(tmp_path):
    lenient = json.loads(cli("lock", "status", "--profile", FAST, "--lock-dir", str(tmp_path / "a"), "--json", fakes=False).stdout)
    d = lenient["preflight"]["detail"]["docker"]
    assert d["state"] == "no-daemon" and d["idle"] is True and "counted as idle" in d["note"]
    strict = json.loads(cli("lock", "status", "--profile", STRICT, "--lock-dir", str(tmp_path / "a"), "--json", fakes=False).stdout)
    assert strict["preflight"]["docker_idle"] is False and "counted as busy (lock.docker_no_daemon)" in strict["preflight"]["docker"]


def test_standalone_acquire_outlives_process_and_release_rules(tmp_path):
    d = tmp_path / "lk"
    a = cli("lock", "acquire", "--profile", FAST, "--lock-dir", str(d), "--owner", "alice", "--json")
    assert a.returncode == 0, a.stderr
    rec = json.loads(a.stdout)["owner"]
    assert rec.split()[0] == "alice" and "pid=" not in rec and "run=acquire-" in rec
    assert (d / "owner").read_text().strip() == rec  # still held after the process ended
    again = cli("lock", "acquire", "--profile", FAST, "--lock-dir", str(d), "--no-wait")
    assert again.returncode == 4 and "held by alice" in again.stderr
    wrong = cli("lock", "release", "--profile", FAST, "--lock-dir", str(d))
    assert wrong.returncode == 2 and "held by alice" in wrong.stderr and (d / "owner").read_text().strip() == rec
    ok = cli("lock", "release", "--profile", FAST, "--lock-dir", str(d), "--owner", "alice")
    assert ok.returncode == 0 and (d / "owner").read_text().startswith("FREE released-by-alice ")


def test_release_refuses_a_live_process_unless_forced(tmp_path):
    import parity.gpu.lock as L

    d = tmp_path / "lk"
    d.mkdir()
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        (d / "owner").write_text(f"{L.whoami()} {int(time.time())} pid={sleeper.pid}\n")
        r = cli("lock", "release", "--profile", FAST, "--lock-dir", str(d))
        assert r.returncode == 2 and f"running process (pid {sleeper.pid})" in r.stderr
        f = cli("lock", "release", "--profile", FAST, "--lock-dir", str(d), "--force")
        assert f.returncode == 0 and (d / "owner").read_text().startswith("FREE")
    finally:
        sleeper.kill()
        sleeper.wait()


def test_bad_input_is_one_line_exit_2(tmp_path):
    for args in (["lock", "acquire", "--pid", "999999999"], ["lock", "acquire", "--owner", "FREEloader"], ["lock", "run"]):
        r = cli(*args, "--profile", FAST, "--lock-dir", str(tmp_path / "lk"))
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.startswith("parity: error:") and r.stderr.count("\n") == 1, r.stderr


def test_lock_run_exit_code_and_json(tmp_path):
    r = cli("lock", "run", "--profile", FAST, "--lock-dir", str(tmp_path / "lk"), "--json", "--", "sh", "-c", "echo hi; exit 3")
    assert r.returncode == 3
    doc = json.loads(r.stdout)  # exactly one JSON document; the command's output went to stderr
    assert doc["rc"] == 3 and doc["command"] == ["sh", "-c", "echo hi; exit 3"] and "hi" in r.stderr


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has a real nvidia-smi")
def test_hw_on_this_machine_is_cpu_only(tmp_path):
    r = cli("hw", "--out", str(tmp_path), fakes=False)
    assert r.returncode == 0 and "hardware_class=cpu_only" in r.stdout
    assert json.loads((tmp_path / "hardware.json").read_text())["hardware_class"] == "cpu_only"


@pytest.mark.parametrize("mode,cls,mem", [("h100-idle", "hopper", 81559), ("gb10-idle", "gb10_or_workstation_blackwell", None)])
def test_hw_json_with_fake_nvidia_smi(mode, cls, mem):
    r = cli("hw", "--json", FAKE_NVIDIA_SMI=mode)
    doc = json.loads(r.stdout)
    assert doc["hardware_class"] == cls and doc["gpus"][0]["memory_mib"] == mem and doc["cuda_version"] == "13.0"
