"""Children cannot outlive their parity (Linux; elsewhere these are no-ops).

- `child_setup(parent)`: a preexec_fn that asks the kernel for SIGKILL when the parent
  THREAD dies (PR_SET_PDEATHSIG), so a SIGKILLed parity takes its children with it.
- Every child carries TAG_ENV=<tag> in its environment; its descendants inherit it, across
  setsid too (`setsid cmd &` leaves the process group, not the environment).  `kill_tree`
  stops a child's group and every live process of its tag, wherever it was re-parented.
  (PR_SET_CHILD_SUBREAPER would re-parent such orphans to parity instead, but then parity
  must reap them, and an orphan that exits on its own leaves a zombie with no environment
  to tell whose it was; the tag needs no reaping.)
- `processes_with_env(name, value)`: the same search for any variable (a reclaimer looks
  for the children of a SIGKILLed lock holder by the lock record they inherited).
- `group_members(pgid)`: the live (non-zombie) members of a process group.
"""

from __future__ import annotations

import os
import signal
import sys

TAG_ENV = "PARITY_PROC_TAG"
PR_SET_PDEATHSIG = 1
_IS_LINUX = sys.platform.startswith("linux")
_libc = None


def _prctl():
    global _libc
    if _libc is None and _IS_LINUX:
        import ctypes

        try:
            _libc = ctypes.CDLL(None, use_errno=True)
            _libc.prctl  # noqa: B018  (resolved before any fork: the child must not dlopen)
        except (OSError, AttributeError):
            _libc = False
    return _libc.prctl if _libc else None


def child_setup(parent: int):
    """preexec_fn for Popen: SIGKILL on the parent thread's death; gone already -> exit."""
    prctl = _prctl()

    def setup() -> None:
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
            if os.getppid() != parent:  # the parent died between fork and prctl
                os._exit(137)

    return setup


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, pgrp) from /proc/PID/stat."""
    raw = _read(f"/proc/{pid}/stat")
    if not raw:
        return None
    fields = raw.rsplit(b")", 1)[-1].split()
    try:
        return fields[0].decode(), int(fields[1]), int(fields[2])
    except (IndexError, ValueError):
        return None


def _pids() -> list[int]:
    try:
        return [int(d) for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return []


def processes_with_env(name: str, value: str) -> list[int]:
    """Live processes on this host (that we may read) whose environment has name=value."""
    entry, me, found = f"{name}={value}".encode(), os.getpid(), []
    for pid in _pids():
        if pid == me:
            continue
        raw = _read(f"/proc/{pid}/environ")  # empty for zombies and kernel threads
        if raw and entry in raw.split(b"\0"):
            st = _stat(pid)
            if st and st[0] != "Z":
                found.append(pid)
    return found


def pid_alive(pid: int) -> bool:
    """True for a live process on this host (a zombie counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    st = _stat(pid)
    return st is None or st[0] != "Z"


def started_at(pid: int) -> float | None:
    """When a live process started (epoch seconds); None when it is gone, a zombie, or unknown."""
    raw = _read(f"/proc/{pid}/stat")
    stat = _read("/proc/stat")
    if not raw or not stat:
        return None
    fields = raw.rsplit(b")", 1)[-1].split()
    try:
        if fields[0] == b"Z":
            return None
        btime = next(int(ln.split()[1]) for ln in stat.splitlines() if ln.startswith(b"btime "))
        return btime + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (IndexError, ValueError, StopIteration, OSError):
        return None


def group_members(pgid: int) -> list[int]:
    """Live members of a process group (zombies do not count: an unreaped dead child is dead)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    except PermissionError:
        pass
    out = []
    for pid in _pids():
        st = _stat(pid)
        if st and st[2] == pgid and st[0] != "Z":
            out.append(pid)
    return out


def kill_pids(pids: list[int], sig: int = signal.SIGKILL) -> None:
    for p in pids:
        try:
            os.kill(p, sig)
        except (ProcessLookupError, PermissionError):
            pass


def kill_tree(tag: str | None, pgid: int | None = None, exclude: int | None = None) -> list[int]:
    """SIGKILL a child's process group and every live process carrying its tag (what left the
    group with setsid), but `exclude` (the child itself while its Popen owns its exit status)."""
    pids = [p for p in processes_with_env(TAG_ENV, tag) if p != exclude] if tag else []
    if pgid:
        try:
            os.killpg(pgid, signal.SIGKILL)
            pids += [p for p in group_members(pgid) if p != exclude and p not in pids]
        except (ProcessLookupError, PermissionError):
            pass
    kill_pids(pids)
    wait_gone(pids)
    return pids


def wait_gone(pids: list[int], within_s: float = 5.0) -> list[int]:
    """Wait (bounded) until the processes are dead; SIGKILL is delivered asynchronously.
    Returns the ones still alive."""
    import time

    deadline = time.monotonic() + within_s
    while True:
        left = [p for p in pids if (st := _stat(p)) is not None and st[0] != "Z"]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.01)
