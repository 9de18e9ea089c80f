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


def parse_schedstat(text: str) -> float:
    """/proc/<pid>/task/<tid>/schedstat 'run_ns wait_ns slices' -> seconds on a CPU (nanosecond resolution)."""
    return int(text.split()[0]) / 1e9


def run_seconds(pid: int) -> float | None:
    """Time every live thread of pid spent on a CPU, from schedstat (ns); None where the kernel has no schedstat.
    utime + stime in /proc/<pid>/stat count 10 ms ticks: too coarse for a point of a few milliseconds."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    total, seen = 0.0, False
    for tid in tids:
        try:
            total += parse_schedstat(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text())
            seen = True
        except (OSError, ValueError, IndexError):
            continue
    return total if seen else None


def cpu_seconds(pids) -> dict[int, float]:
    """{pid: CPU seconds} of each live pid: its threads' schedstat run time (else utime + stime), plus its
    reaped children (cutime + cstime)."""
    out = {}
    for p in pids:
        st = stat(p)
        if st is not None:
            run = run_seconds(p)
            out[p] = (st["utime_s"] + st["stime_s"] if run is None else run) + st["cutime_s"] + st["cstime_s"]
    return out


def self_cpu() -> dict:
    """This process (every thread: time.process_time, ns resolution) and its reaped children, in seconds."""
    import time

    st = stat(os.getpid()) or {}
    return {"self_s": time.process_time(), "children_s": st.get("cutime_s", 0.0) + st.get("cstime_s", 0.0)}


def parse_environ(data: bytes) -> dict[str, str]:
    """/proc/<pid>/environ (NUL-separated NAME=value) -> {NAME: value}."""
    out = {}
    for item in data.split(b"\0"):
        name, eq, value = item.decode(errors="replace").partition("=")
        if eq and name:
            out[name] = value
    return out


def environ(pid: int) -> dict[str, str] | None:
    """The environment pid started with; None when it is gone or not readable from here."""
    try:
        return parse_environ(Path(f"/proc/{pid}/environ").read_bytes())
    except OSError:
        return None
