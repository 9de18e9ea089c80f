"""SIGINT / SIGTERM to a running parity: every process it started dies, the run
is marked interrupted, exit 130.  Real process tree: bash with two background sleeps."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

CAMPAIGN = """\
name: sleeper
profile: smoke
steps:
  - name: sleeper
    kind: shell
    with: {argv: [bash, -c, "sleep 300 & sleep 300 & wait"]}
"""


def _procs() -> dict[int, tuple[int, int, str]]:
    """pid -> (ppid, pgid, state) from /proc."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(d)] = (int(fields[1]), int(fields[2]), fields[0])
    return out


def _live_group(pgid: int) -> list[int]:
    """Members of a process group that are not zombies (a zombie runs no code;
    it only waits for its new parent to reap it)."""
    return [pid for pid, (_, g, state) in _procs().items() if g == pgid and state != "Z"]


def _wait_for_tree(parity_pid: int, timeout: float = 60) -> int:
    """The process group of parity's child once bash and both sleeps run in it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        procs = _procs()
        for pid, (ppid, pgid, _) in procs.items():
            if ppid == parity_pid and pgid == pid and len(_live_group(pgid)) >= 3:
                return pgid
        time.sleep(0.1)
    raise AssertionError("the shell step's process tree did not appear")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_stops_every_child_and_marks_run_interrupted(tmp_path, sig):
    camp = tmp_path / "sleeper.yaml"
    camp.write_text(CAMPAIGN)
    runs = tmp_path / "runs"
    proc = subprocess.Popen(
        [sys.executable, "-m", "parity", "--artifacts", str(runs), "campaign", "run", str(camp)],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    pgid = None
    try:
        pgid = _wait_for_tree(proc.pid)
        members = _live_group(pgid)
        assert len(members) >= 3  # bash + 2 x sleep
        os.kill(proc.pid, sig)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert err.strip().splitlines()[-1] == "parity: error: interrupted", err
        assert _live_group(pgid) == [], f"still alive in group {pgid}: {_live_group(pgid)}"
        for pid in members:
            st = _procs().get(pid)
            assert st is None or st[2] == "Z", f"pid {pid} survived: {st}"
        (run_dir,) = [p for p in runs.iterdir() if p.is_dir()]
        manifest = json.loads((run_dir / "manifest.json").read_text())
        assert manifest["status"] == "interrupted"
        assert manifest["steps"]["sleeper"]["status"] == "interrupted"
        assert manifest["ended"]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        if pgid is not None:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
