"""Host figures from /proc: load average, a process's CPU time, a process tree.

parse_*() read captured text (tests/data/telemetry/); the readers never raise: a
process that is gone reads as None."""

from __future__ import annotations

import os
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def parse_loadavg(text: str) -> dict:
    """'0.52 0.58 0.59 1/467 3607' -> {load1, load5, load15, running, tasks}."""
    f = text.split()
    run, _, tasks = f[3].partition("/")
    return {"load1": float(f[0]), "load5": float(f[1]), "load15": float(f[2]), "running": int(run), "tasks": int(tasks)}


def parse_stat(text: str) -> dict:
    """/proc/<pid>/stat -> {pid, comm, ppid, utime_s, stime_s, cutime_s, cstime_s} (the comm may hold spaces and parens)."""
    head, _, rest = text.rpartition(")")
    pid, _, comm = head.partition(" (")
    f = rest.split()  # f[0] is field 3 (state)
    ticks = lambda i: int(f[i - 3]) / TICK  # noqa: E731  (fields numbered as in proc(5))
    return {"pid": int(pid), "comm": comm, "ppid": int(f[1]), "utime_s": ticks(14), "stime_s": ticks(15), "cutime_s": ticks(16), "cstime_s": ticks(17)}


def loadavg() -> dict | None:
    try:
        return parse_loadavg(Path("/proc/loadavg").read_text())
    except (OSError, ValueError, IndexError):
        return None


def stat(pid: int) -> dict | None:
    try:
        return parse_stat(Path(f"/proc/{pid}/stat").read_text())
    except (OSError, ValueError, IndexError):
        return None


def children(pid: int) -> list[int]:
    """Direct children (every thread's /proc/<pid>/task/<tid>/children), [] when gone."""
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            out += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except (OSError, ValueError):
            continue
    return out


def tree(pid: int) -> list[int]:
    """pid and every descendant alive now."""
    seen, todo = [], [pid]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.append(p)
        todo += children(p)
    return seen


def cpu_seconds(pids) -> dict[int, float]:
    """{pid: utime + stime} of each live pid; a process's reaped children (cutime + cstime) count for it."""
    out = {}
    for p in pids:
        st = stat(p)
        if st is not None:
            out[p] = st["utime_s"] + st["stime_s"] + st["cutime_s"] + st["cstime_s"]
    return out


def self_cpu() -> dict:
    """This process (every thread) and its reaped children, in seconds."""
    st = stat(os.getpid()) or {}
    return {"self_s": st.get("utime_s", 0.0) + st.get("stime_s", 0.0), "children_s": st.get("cutime_s", 0.0) + st.get("cstime_s", 0.0)}
