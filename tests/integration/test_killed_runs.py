"""A SIGKILLed parity (issue 17, case 2): its children die with it, and its run directory,
whose manifest says `running` forever, is marked interrupted (with the reason) by the next
parity that sees it: the GPU lock reclaim, `campaign run --resume`, `report`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import REPO

FAKES = Path(__file__).resolve().parents[1] / "fakes" / "bin"


def env() -> dict:
    e = dict(os.environ, PATH=f"{FAKES}{os.pathsep}{os.environ['PATH']}", PARITY_NO_NVML="1")
    e.pop("PARITY_GPU_LOCK", None)
    return e


def parity(*args, timeout=300, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "parity", *args], cwd=cwd, env=env(), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def files(tmp_path: Path, lock_step: bool) -> tuple[Path, Path, Path]:
    prof = tmp_path / "p.yaml"
    prof.write_text(f"extends: smoke\nlock: {{dir: {tmp_path / 'lk'}, poll_s: 0.2, timeout_s: 120, idle_checks: 1, preflight: false}}\n")
    camp = tmp_path / "c.yaml"
    steps = "  - {name: lock, kind: lock}\n" if lock_step else ""
    camp.write_text(
        "name: killed\nsteps:\n" + steps
        + f"  - {{name: nap, kind: shell, with: {{argv: [sh, -c, 'echo $$ > {tmp_path}/nap.pid; test -e {tmp_path}/go || exec sleep 300']}}}}\n"
    )
    return prof, camp, tmp_path / "runs"


def start_and_kill(tmp_path: Path, lock_step: bool) -> tuple[Path, Path, Path, int]:
    prof, camp, arts = files(tmp_path, lock_step)
    proc = subprocess.Popen([sys.executable, "-m", "parity", "--artifacts", str(arts), "campaign", "run", str(camp), "--profile", str(prof)],
                            cwd=REPO, env=env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    pidfile = tmp_path / "nap.pid"
    deadline = time.monotonic() + 120
    while not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.05)
    nap = int(pidfile.read_text())
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    (run,) = arts.iterdir()
    assert json.loads((run / "manifest.json").read_text())["status"] == "running"  # what the kill left
    return prof, camp, run, nap


def gone(pid: int, within: float = 30.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def test_lock_reclaim_marks_the_killed_holders_run_interrupted(tmp_path):
    prof, _, run, nap = start_and_kill(tmp_path, lock_step=True)
    assert gone(nap)  # its command died with it (parent-death signal)
    owner = (tmp_path / "lk" / "owner").read_text()
    assert f"run={run.name}" in owner
    r = parity("--artifacts", str(run.parent), "lock", "run", "--profile", str(prof), "--", "true")
    assert r.returncode == 0, r.stderr
    assert "reclaimed" in r.stderr and "marked interrupted" in r.stderr
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "interrupted" and f"pid {m['pid']}" in m["error"] and "lock reclaim" in m["error"]


def test_resume_marks_the_killed_run_interrupted_then_resumes_it(tmp_path):
    prof, camp, run, nap = start_and_kill(tmp_path, lock_step=False)
    assert gone(nap)
    killed_pid = json.loads((run / "manifest.json").read_text())["pid"]
    (tmp_path / "go").write_text("")
    r = parity("--artifacts", str(run.parent), "campaign", "run", str(camp), "--profile", str(prof), "--resume", str(run))
    assert r.returncode == 0, r.stderr
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "complete" and m["resumed"] is True and m["steps"]["nap"]["status"] == "complete"
    assert m["pid"] != killed_pid  # the resuming parity owns the run now
    assert m["previous"]["status"] == "interrupted" and f"pid {killed_pid}" in m["previous"]["error"]


def test_report_marks_the_killed_run_interrupted(tmp_path):
    _, _, run, _ = start_and_kill(tmp_path, lock_step=False)
    parity("report", str(run), cwd=tmp_path)  # it reads the run (its reports go under tmp_path/reports)
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "interrupted" and "ended without closing this run" in m["error"]


def test_resume_refuses_a_run_that_is_still_running(tmp_path):
    prof, camp, arts = files(tmp_path, lock_step=False)
    proc = subprocess.Popen([sys.executable, "-m", "parity", "--artifacts", str(arts), "campaign", "run", str(camp), "--profile", str(prof)],
                            cwd=REPO, env=env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "nap.pid").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        (run,) = arts.iterdir()
        r = parity("--artifacts", str(arts), "campaign", "run", str(camp), "--profile", str(prof), "--resume", str(run))
        assert r.returncode == 2 and "still running (pid" in r.stderr, r.stderr
        assert json.loads((run / "manifest.json").read_text())["status"] == "running"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
