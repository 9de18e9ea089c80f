"""`parity --host NAME ...` against a real sshd: the command runs remotely (parity
bootstrapped into a venv from this checkout), streams, and its run dir comes back."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from parity.serving import rounds


def parity(*args, timeout=300, **kw):
    return subprocess.run([sys.executable, "-m", "parity", *args], capture_output=True, text=True, cwd=REPO,
                          stdin=subprocess.DEVNULL, timeout=timeout, **kw)


def pids(pattern: str) -> list[str]:
    return subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()


def wait_until(pred, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not pred() and time.monotonic() < deadline:
        time.sleep(0.1)
    return pred()


def small_campaign(tmp_path: Path, extra: str = "", name: str = "small") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"name: {name}\n"
        "vars: {msg: \"it's a $(test); ok\"}\n"
        f"{extra}"
        "steps:\n"
        "  - {name: synth, kind: synth, with: {models: [tiny]}}\n"
        "  - {name: say, kind: shell, with: {argv: [sh, -c, 'printf \"%s\" \"$1\"; hostname', sh, \"${msg}\"]}}\n"
    )
    return path


def test_campaign_runs_remotely_and_the_run_dir_comes_back(ssh_profile, tmp_path):
    camp = small_campaign(tmp_path)
    arts = tmp_path / "runs"
    r = parity("--artifacts", str(arts), "--host", "local-ssh", "campaign", "run", str(camp), "--profile", str(ssh_profile), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)  # exactly one JSON document: the remote parity's
    (local,) = list(arts.iterdir())
    assert doc["run_dir"].endswith(local.name) and doc["run_dir"] != str(local)  # it ran in the remote workdir
    m = json.loads((local / "manifest.json").read_text())
    assert m["status"] == "complete" and set(m["steps"]) == {"synth", "say"}
    assert m["remote"]["host"] == "local-ssh" and m["remote"]["exit_code"] == 0
    assert "--host" not in m["argv"]
    assert (local / "steps" / "say.log").read_text().startswith("it's a $(test); ok")
    assert json.loads((local / "steps" / "synth.json").read_text())["tiny"]["sha256"]
    remote_files = sorted(str(p.relative_to(m["remote"]["path"])) for p in Path(m["remote"]["path"]).rglob("*"))
    local_files = sorted(str(p.relative_to(local)) for p in local.rglob("*"))
    assert local_files == remote_files  # complete copy (the server is this machine)


def test_remote_exit_code_and_error_line_pass_through(ssh_profile, tmp_path):
    camp = tmp_path / "fails.yaml"
    camp.write_text("name: fails\nsteps:\n  - {name: boom, kind: shell, with: {argv: [sh, -c, 'echo bad >&2; exit 9']}}\n")
    arts = tmp_path / "runs"
    r = parity("--artifacts", str(arts), "--host", "local-ssh", "campaign", "run", str(camp), "--profile", str(ssh_profile))
    assert r.returncode == 1
    assert "parity: error: sh exited 9: bad" in r.stderr
    (local,) = list(arts.iterdir())
    assert json.loads((local / "manifest.json").read_text())["status"] == "failed"


@pytest.mark.parametrize(
    "host, words",
    [
        ("closed-port", "connection refused"),
        ("wrong-key", "authentication refused"),
        ("unknown-key", "unknown host key"),
        ("no-parity", "remote parity"),
    ],
)
def test_bad_hosts_exit_2_with_one_line(ssh_profile, tmp_path, host, words):
    camp = small_campaign(tmp_path)
    r = parity("--artifacts", str(tmp_path / "runs"), "--host", host, "campaign", "run", str(camp), "--profile", str(ssh_profile))
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("parity: error: ") and words in lines[0]
    assert "Traceback" not in r.stderr


def _start_sleeper(ssh_profile, tmp_path, m):
    camp = tmp_path / "sleeper.yaml"
    camp.write_text(f"name: sleeper\nsteps:\n  - {{name: nap, kind: shell, with: {{argv: [sleep, '{m}']}}}}\n")
    arts = tmp_path / "runs"
    proc = subprocess.Popen(
        [sys.executable, "-m", "parity", "--artifacts", str(arts), "--host", "local-ssh", "campaign", "run", str(camp), "--profile", str(ssh_profile)],
        cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert wait_until(lambda: pids(f"^sleep {m}"), 60), proc.communicate(timeout=5)
    return proc, arts


def test_sigkill_of_local_parity_leaves_no_remote_process(ssh_profile, tmp_path):
    m = f"{random.randint(100, 999)}.{random.randint(1000, 9999)}"
    proc, _ = _start_sleeper(ssh_profile, tmp_path, m)
    import hashlib

    uploaded = hashlib.sha256((tmp_path / "sleeper.yaml").read_bytes()).hexdigest()[:12]
    assert pids(uploaded)  # the remote parity names the uploaded campaign file
    proc.send_signal(signal.SIGKILL)  # the connection drops without a goodbye
    proc.communicate(timeout=10)
    assert wait_until(lambda: not pids(m), 30), pids(m)  # its shell step and the wrappers
    assert wait_until(lambda: not pids(uploaded), 30), pids(uploaded)  # the remote parity itself


def test_sigint_stops_remote_run_and_pulls_interrupted_run_dir(ssh_profile, tmp_path):
    m = f"{random.randint(100, 999)}.{random.randint(1000, 9999)}"
    proc, arts = _start_sleeper(ssh_profile, tmp_path, m)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert not pids(m)
    (local,) = list(arts.iterdir())
    man = json.loads((local / "manifest.json").read_text())
    assert man["status"] == "interrupted" and man["steps"]["nap"]["status"] == "interrupted"


def test_hosts_fan_out_collects_run_dirs_under_one_parent(ssh_profile, tmp_path):
    camp = small_campaign(tmp_path, "hosts: [local-ssh, local-ssh-b]\nparallel_hosts: true\n", name="fan")
    arts = tmp_path / "runs"
    r = parity("--artifacts", str(arts), "campaign", "run", str(camp), "--profile", str(ssh_profile), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    (parent,) = list(arts.iterdir())
    assert doc["run_dir"] == str(parent)
    table = json.loads((parent / "hosts.json").read_text())
    assert [row["host"] for row in table] == ["local-ssh", "local-ssh-b"]
    for row in table:
        assert row["exit_code"] == 0 and row["status"] == "complete"
        sub = parent / row["run_dir"]
        assert sub.parent == parent / "hosts" / row["host"]
        assert json.loads((sub / "manifest.json").read_text())["remote"]["host"] == row["host"]
        assert (sub / "steps" / "say.log").exists()
    assert json.loads((parent / "manifest.json").read_text())["status"] == "complete"


@pytest.mark.slow
def test_smoke_campaign_over_ssh(ssh_profile, tmp_path, engine_bins, tiny_model):
    """campaigns/smoke.yaml through --host: the remote reuses ~/.cache/parity (same machine).
    Every step, the three engines (real vLLM included) once: one block, not the profile's three
    (each vLLM start is 1-2 minutes on a 2-core box; the blocks' rotation and statistics are
    test_snapshot.py's, and `make smoke` runs the campaign as shipped).  The suite's one
    snapshot of paged and stock llama-server and real vLLM on the same weights: tokens and
    requests reconcile with the servers' own /metrics, and the greedy outputs agree token for
    token (test_snapshot.py had its own local run of that: a second vLLM start, ~50 CPU-s)."""
    import yaml

    from sshd import free_port

    arts = tmp_path / "runs"
    doc = yaml.safe_load(ssh_profile.read_text())
    doc["hosts"]["local-ssh"]["lock_dir"] = str(tmp_path / "lock")  # its own lock and port: never waits on another suite's smoke run
    doc["serving"] = {"repeat": 1, "port": free_port()}
    prof = tmp_path / "one-block.yaml"
    prof.write_text(yaml.safe_dump(doc))
    r = parity("--artifacts", str(arts), "--host", "local-ssh", "campaign", "run", "campaigns/smoke.yaml",
               "--profile", str(prof), "--json", timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    (local,) = list(arts.iterdir())
    m = json.loads((local / "manifest.json").read_text())
    assert m["status"] == "complete" and m["remote"]["exit_code"] == 0
    for step in json.loads(r.stdout)["steps"]:
        assert m["steps"][step]["status"] == "complete"
        assert (local / "steps" / f"{step}.json").is_file()
    summary = json.loads((local / "summary.json").read_text())
    # one measured block of the three engines (a calibration trial block before it, when this box needed one)
    assert {a["engine"] for a in summary["arms"]} == {"paged", "stock", "vllm"} and len({row["repeat"] for row in summary["rows"]}) == 1
    gen = summary["shape"]["gen"]
    for row in summary["rows"]:
        recon = {q["quantity"]: q for q in row["reconciliation"]}
        assert recon["generation_tokens"]["status"] == recon["prompt_tokens"]["status"] == "ok", (row["engine"], recon)
        sent = row["n"] * rounds.count(row["n"], summary["shape"]["min_requests"])  # a point runs rounds of N
        assert row["requests"] == sent and recon["generation_tokens"]["server"] == sent * gen
        want = "ok" if row["engine"] == "vllm" else "not exposed"  # llama-server has no request counter
        assert recon["requests"]["status"] == want and (want != "ok" or recon["requests"]["server"] == row["requests"])
    op = summary["output_parity"]
    assert op["status"] == "pass" and {p["engine"] for p in op["pairs"]} == {"paged", "vllm"}
    assert all(p["agreement"] == 1.0 and p["kl_mean"] <= 0.01 for p in op["pairs"]), op["pairs"]
    assert {m["engine"] for m in summary["medians"]} == {"paged", "stock", "vllm"}
    assert all(r["noise"].startswith(f"noise unknown: {r['repeats']} valid repeat") and r["repeats"] <= 1 for r in summary["ratios"])  # one block: no verdict
    users = (local / "summary.tsv").read_text()
    assert "ratio\tn\tvllm_decode_over_stock" in users and "ratio\tn\tpaged_decode_over_stock" in users


def test_host_lock_dir_is_the_remote_lock(ssh_profile, tmp_path):
    """hosts.NAME.lock_dir wins over the profile's lock.dir on the remote side."""
    import yaml

    doc = yaml.safe_load(ssh_profile.read_text())
    lock_dir = tmp_path / "host-lock"
    doc["hosts"]["local-ssh"]["lock_dir"] = str(lock_dir)
    doc["lock"] = {"dir": str(tmp_path / "profile-lock")}
    prof = tmp_path / "p.yaml"
    prof.write_text(yaml.safe_dump(doc))
    r = parity("--host", "local-ssh", "lock", "acquire", "--owner", "nightly@ci", "--no-wait", "--profile", str(prof))
    assert r.returncode == 0, r.stderr
    assert (lock_dir / "owner").read_text().startswith("nightly@ci ") and not (tmp_path / "profile-lock").exists()
    r = parity("--host", "local-ssh", "lock", "release", "--owner", "nightly@ci", "--profile", str(prof))
    assert r.returncode == 0, r.stderr
    assert (lock_dir / "owner").read_text().startswith("FREE released-by-nightly@ci")


def test_config_show_resolves_on_the_host(ssh_profile):
    """--host applies to every command: config show prints the profile as the remote parity reads it."""
    r = parity("--host", "local-ssh", "config", "show", "--profile", str(ssh_profile), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["name"] == "smoke-ssh" and "/inputs/" in doc["source_file"] and doc["source_file"] != str(ssh_profile)


def test_bootstrapped_venv_sees_the_packages_of_the_hosts_python(ssh_profile):
    """hosts.local-ssh.python is this test venv's python, itself a venv: --system-site-packages
    alone would give the remote venv the base interpreter's packages instead of these."""
    assert parity("--host", "local-ssh", "config", "show", "--profile", str(ssh_profile), "--json").returncode == 0
    workdir = Path(yaml.safe_load(ssh_profile.read_text())["hosts"]["local-ssh"]["workdir"])
    (pth,) = workdir.glob("venv/lib/python*/site-packages/_parity_base.pth")
    assert sysconfig.get_paths()["purelib"] in pth.read_text().splitlines()
