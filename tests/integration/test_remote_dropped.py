"""A dropped SSH connection (issue 17, case 5), with a real sshd on 127.0.0.1: the remote
run is marked interrupted (not `failed: SystemExit: 1`), the local error names the remote
run dir, and what can be pulled back is pulled back."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from conftest import REPO


def pids(pattern: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out]


def wait_until(pred, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not pred() and time.monotonic() < deadline:
        time.sleep(0.1)
    return pred()


def _sleeper(tmp_path: Path, m: str) -> Path:
    camp = tmp_path / "sleeper.yaml"
    camp.write_text(f"name: sleeper\nsteps:\n  - {{name: nap, kind: shell, with: {{argv: [sleep, '{m}']}}}}\n")
    return camp


def _remote_runs(ssh_profile: Path) -> Path:
    return Path(yaml.safe_load(ssh_profile.read_text())["hosts"]["local-ssh"]["workdir"]) / "runs"


def _start(ssh_profile: Path, tmp_path: Path, m: str):
    arts = tmp_path / "runs"
    before = {p for p in _remote_runs(ssh_profile).glob("*") if p.is_dir()} if _remote_runs(ssh_profile).exists() else set()
    proc = subprocess.Popen(
        [sys.executable, "-m", "parity", "--artifacts", str(arts), "--host", "local-ssh", "campaign", "run", str(_sleeper(tmp_path, m)), "--profile", str(ssh_profile)],
        cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert wait_until(lambda: pids(f"^sleep {m}"), 120), proc.communicate(timeout=5)
    (remote,) = {p for p in _remote_runs(ssh_profile).glob("*") if p.is_dir()} - before  # run dirs (the history store sits beside them)
    return proc, arts, remote


def test_sigkilled_local_parity_leaves_the_remote_run_interrupted(ssh_profile, tmp_path):
    m = f"{random.randint(100, 999)}.{random.randint(1000, 9999)}"
    proc, _, remote = _start(ssh_profile, tmp_path, m)
    proc.send_signal(signal.SIGKILL)  # the connection drops without a goodbye
    proc.communicate(timeout=30)
    assert wait_until(lambda: not pids(m), 60), pids(m)
    status = lambda: json.loads((remote / "manifest.json").read_text())["status"]  # noqa: E731
    assert wait_until(lambda: status() != "running", 60)  # the remote parity closes its run after stopping its step
    man = json.loads((remote / "manifest.json").read_text())
    assert man["status"] == "interrupted", man.get("error")
    assert "connection" in man["error"] and "SystemExit" not in man["error"]
    assert man["steps"]["nap"]["status"] == "interrupted"


def _session_sshd(remote_parity_pid: int) -> int:
    """The per-connection sshd process above the remote parity (its nearest sshd ancestor)."""
    pid = remote_parity_pid
    while pid > 1:
        stat = Path(f"/proc/{pid}/stat").read_text()
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        if Path(f"/proc/{pid}/comm").read_text().strip() == "sshd":
            return pid
    raise AssertionError("no sshd above the remote parity")


def test_dropped_connection_names_the_remote_run_dir_and_pulls_it_back(ssh_profile, tmp_path):
    m = f"{random.randint(100, 999)}.{random.randint(1000, 9999)}"
    proc, arts, remote = _start(ssh_profile, tmp_path, m)
    (sleeper,) = pids(f"^sleep {m}")
    os.kill(_session_sshd(sleeper), signal.SIGKILL)  # the network goes away; the local parity lives on
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 4, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("parity: error: ") and "connection lost" in last and str(remote) in last, err
    assert "Traceback" not in err
    assert wait_until(lambda: not pids(m), 60), pids(m)
    (local,) = arts.iterdir()  # pulled back over a new connection
    assert local.name == remote.name
    man = json.loads((local / "manifest.json").read_text())
    assert man["status"] == "interrupted" and man["remote"]["path"] == str(remote)
    assert json.loads((remote / "manifest.json").read_text())["status"] == "interrupted"


def test_closed_output_marks_the_run_interrupted_not_failed(tmp_path):
    """What a dropped channel does to the remote parity, locally: its stdout reader goes away
    mid-run.  rich's broken-pipe handler exits 1, which the run dir recorded as
    `failed: SystemExit: 1`; it is an interruption."""
    camp = tmp_path / "c.yaml"
    camp.write_text(f"name: talk\nsteps:\n  - {{name: a, kind: shell, with: {{argv: [sh, -c, 'until [ -e {tmp_path}/go ]; do sleep 0.05; done']}}}}\n"
                    "  - {name: b, kind: shell, with: {argv: ['true']}}\n")  # fmt: skip
    arts = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "parity", "--artifacts", str(arts), "campaign", "run", str(camp)],
                            cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    assert wait_until(lambda: arts.exists() and any(arts.iterdir()), 120)
    proc.stdout.close()  # the reader goes away; parity's next line of output hits a broken pipe
    (tmp_path / "go").write_text("")
    proc.wait(120)
    (run,) = arts.iterdir()
    man = json.loads((run / "manifest.json").read_text())
    assert man["status"] == "interrupted", man.get("error")
    assert "output stream closed" in man["error"] and "SystemExit" not in man["error"]
