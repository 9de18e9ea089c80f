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


# a wrapper like nsys: forwards SIGTERM to its command a moment later (nsys first ends its
# collection; two signals at once would merge into one pending signal) and exits with it; the
# command counts the SIGTERMs it receives and exits a while after the first
WRAPPER = r"""
import signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]])
def forward(s, f):
    time.sleep(0.2)
    child.send_signal(s)
signal.signal(signal.SIGTERM, forward)
sys.exit(child.wait())
"""
COUNTER = r"""
import signal, sys, time
n = 0
def on(s, f):
    global n
    n += 1
signal.signal(signal.SIGTERM, on)
open(sys.argv[1] + ".ready", "w").close()
while not n:
    time.sleep(0.01)
time.sleep(1.0)
open(sys.argv[1], "w").write(str(n))
"""


@pytest.mark.parametrize("leader_only, signals", [(False, 2), (True, 1)])
def test_leader_only_stop_signals_a_wrapped_command_once(tmp_path, leader_only, signals):
    """The group stop reaches the wrapped command twice (from the group signal and from the
    wrapper); leader_only reaches it once, through the wrapper (parity's nsys captures)."""
    import sys
    import time

    count = tmp_path / "count"
    proc = LocalRunner().spawn([sys.executable, "-c", WRAPPER, COUNTER, str(count)], log_path=str(tmp_path / "log"))
    deadline = time.monotonic() + 60
    while not count.with_name("count.ready").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.stop(30, leader_only=leader_only)
    assert count.read_text() == str(signals)
