"""No orphan outlives its parity (issue 17, cases 2 and 7), with real processes:
- a tool that leaves a detached grandchild (`setsid sleep &`) holding its stdout: the run
  returns at once (no pipe-drain wait) and the grandchild is stopped;
- the same from a long-lived spawned process, stopped with it;
- a SIGKILLed parity takes its children with it (parent-death signal), including a child
  spawned from a worker thread that ended long before (the signal is tied to the thread
  that forks, so spawns go through one long-lived thread)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from parity.runners.local import LocalRunner

REPO = Path(__file__).resolve().parents[2]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def gone_within(pids, seconds=30.0) -> bool:
    deadline = time.monotonic() + seconds
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(alive(p) for p in pids)


def test_detached_grandchild_holding_stdout_is_stopped_and_not_waited_for(tmp_path):
    import threading

    pidfile = tmp_path / "grandchild.pid"
    res = LocalRunner().run(["sh", "-c", f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 300' & sleep 0.2; echo hi"], timeout=120)
    assert res.rc == 0 and res.stdout == "hi\n"
    pid = int(pidfile.read_text())
    assert not alive(pid)  # it left the group, not the run
    # the pipes reached EOF with it: the output readers ended, no drain timeout was waited out
    # (before, run() gave up on them after 5 s and left them blocked on the grandchild's pipe)
    assert not [t for t in threading.enumerate() if t.name.endswith("(pump)") and t.is_alive()]


def test_detached_grandchild_without_stdio_is_stopped(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    res = LocalRunner().run(["sh", "-c", f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 300' </dev/null >/dev/null 2>&1 & sleep 0.2"], timeout=120)
    assert res.rc == 0
    assert not alive(int(pidfile.read_text()))


def test_spawned_process_takes_its_escaped_grandchild_on_stop(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    proc = LocalRunner().spawn(["sh", "-c", f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 300' & exec sleep 300"])
    deadline = time.monotonic() + 30
    while not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    grandchild = int(pidfile.read_text())
    assert alive(grandchild)
    proc.stop(grace_s=1.0)
    assert not alive(proc.pid) and not alive(grandchild)


HOLDER = r"""
import sys, threading, time
from parity.runners.local import LocalRunner
out = sys.argv[1]
r = LocalRunner()
main = r.spawn(["sleep", "300"])
box = {}
t = threading.Thread(target=lambda: box.update(p=r.spawn(["sleep", "301"])))
t.start(); t.join()  # the spawning thread is gone
threading.Thread(target=lambda: r.run(["sh", "-c", "echo $$ > %s.run; exec sleep 302" % out]), daemon=True).start()
time.sleep(0.5)
with open(out, "w") as f:
    f.write(f"{main.pid} {box['p'].pid}\n")
time.sleep(300)
"""


def test_sigkilled_parity_takes_its_children(tmp_path):
    out = tmp_path / "pids"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], cwd=REPO)
    try:
        deadline = time.monotonic() + 60
        while not (out.exists() and Path(f"{out}.run").exists()) and time.monotonic() < deadline:
            time.sleep(0.05)
        spawned = [int(x) for x in out.read_text().split()]
        ran = int(Path(f"{out}.run").read_text())
        assert all(alive(p) for p in spawned + [ran])  # the worker thread's end did not kill its child
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
        assert gone_within(spawned + [ran]), [p for p in spawned + [ran] if alive(p)]
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


@pytest.mark.parametrize("detached", [True])
def test_detached_spawn_outlives_its_parity(tmp_path, detached):
    """`parity build --detach` is meant to outlive parity: no death signal for it."""
    code = "import sys; from parity.runners.local import LocalRunner; p = LocalRunner().spawn(['sleep', '300'], detached=True); print(p.pid, flush=True)"
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    pid = int(res.stdout)
    try:
        time.sleep(0.5)
        assert alive(pid)
    finally:
        os.kill(pid, signal.SIGKILL)


SERVER_HOLDER = r"""
import sys, threading, time
from parity.runners.local import LocalRunner
server, model, port, out = sys.argv[1:5]
box = {}
t = threading.Thread(target=lambda: box.update(p=LocalRunner().spawn([server, "-m", model, "--port", port, "--host", "127.0.0.1", "-t", "1", "--no-warmup"])))
t.start(); t.join()
import os
with open(out + ".tmp", "w") as f:
    f.write(str(box["p"].pid))
os.replace(out + ".tmp", out)
time.sleep(600)
"""


@pytest.mark.slow
def test_sigkilled_parity_frees_its_llama_server_port(tmp_path, engine_bins, tiny_model):
    """A snapshot's real llama-server dies with its SIGKILLed parity: its port is free again."""
    import socket

    from tests.sshd import free_port

    port, out = free_port(), tmp_path / "server.pid"
    holder = subprocess.Popen([sys.executable, "-c", SERVER_HOLDER, str(engine_bins["paged"] / "llama-server"), str(tiny_model), str(port), str(out)], cwd=REPO)

    def listening() -> bool:
        with socket.socket() as s:
            # a port from the ephemeral range can "connect" to itself (TCP self-connect) when nothing listens
            return s.connect_ex(("127.0.0.1", port)) == 0 and s.getsockname() != s.getpeername()

    try:
        # the server may listen before its (starved) holder has written the pid: wait for both
        deadline = time.monotonic() + 120
        while not (listening() and out.exists()) and time.monotonic() < deadline:
            assert holder.poll() is None
            time.sleep(0.1)
        assert listening() and out.exists()
        server = int(out.read_text())
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
        assert gone_within([server])
        # the port is free of our server: nothing, or another program that took the free port
        # (a busy box runs other suites), holds it
        from parity.ports import port_holder

        now = port_holder(port)
        assert now is None or "llama-server" not in now, now
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
