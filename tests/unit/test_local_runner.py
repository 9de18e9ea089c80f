"""LocalRunner waiting: exit codes, timeouts (the process group is stopped), and the
pidfd wait with its fallback to Popen.wait."""

from __future__ import annotations

import os
import subprocess

import pytest

from parity.runners import local
from parity.runners.local import LocalRunner, wait_exit


@pytest.fixture(params=["pidfd", "popen-wait"])
def mode(request, monkeypatch):
    if request.param == "popen-wait":  # a system without pidfd_open
        monkeypatch.delattr(local.os, "pidfd_open", raising=False)
    elif not hasattr(os, "pidfd_open"):
        pytest.skip("no os.pidfd_open here")
    return request.param


def test_exit_code_and_output(mode):
    res = LocalRunner().run(["sh", "-c", "echo out; echo err >&2; exit 3"], timeout=30)
    assert (res.rc, res.stdout, res.stderr, res.timed_out) == (3, "out\n", "err\n", False)


def test_timeout_stops_the_whole_group(mode, tmp_path):
    pidfile = tmp_path / "child.pid"
    res = LocalRunner().run(["sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait"], timeout=0.5)
    assert res.timed_out and res.rc is None and res.duration_s < 60  # not waited for the sleep
    child = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)  # the background sleep went with its group


def test_wait_exit_raises_timeout_then_reaps(mode):
    p = subprocess.Popen(["sleep", "2"])  # outlives the 0.01 s wait even on a loaded box
    with pytest.raises(subprocess.TimeoutExpired):
        wait_exit(p, 0.01)
    assert wait_exit(p, 30) == 0 and p.returncode == 0


def test_spawned_process_wait(mode):
    proc = LocalRunner().spawn(["sleep", "2"])
    assert proc.wait(timeout=0.01) is None
    assert proc.wait(timeout=30) == 0
