"""Keep the load generator off the server's cores where the box has enough: the server
runs under `taskset -c <server cores>` (in its recorded argv), the client's load-generating
thread is pinned to the last serving.telemetry.client_cpus cores for each point and
unpinned after it.  Fewer than serving.telemetry.pin_min_cpus usable cores: nothing is
pinned, and the arm record says so.  Arms that run at once (a crossover's) each get their own
equal part of the cores, split the same way (plan's share)."""

from __future__ import annotations

import os
from contextlib import contextmanager

from parity.decode import replace


def cpu_list(cpus) -> str:
    """[0, 1, 2, 5] -> '0-2,5' (taskset -c syntax)."""
    cpus, out, i = sorted(cpus), [], 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        out.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(out)


def usable_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def plan(cfg, runner, cpus: list[int] | None = None, share: tuple[int, int] | None = None) -> dict:
    """{applied, server_cpus, client_cpus, cpus, how} or {applied: False, why}.  share (i, n): the
    i-th of n equal, disjoint parts of the usable cores in order (arms that run at once: a
    crossover's), each split as above; the cores left over by the division go to none."""
    cpus = usable_cpus() if cpus is None else sorted(cpus)
    if not cfg.pin_cpus:
        return {"applied": False, "why": "off (serving.telemetry.pin_cpus: false)", "cpus": len(cpus)}
    if getattr(runner, "host", "local") != "local":
        return {"applied": False, "why": f"not applied: the server runs on {runner.host}", "cpus": len(cpus)}
    if share is not None:
        return _share(cfg, runner, cpus, *share)
    if len(cpus) < cfg.pin_min_cpus:
        return {"applied": False, "why": f"not applied: only {len(cpus)} cores (serving.telemetry.pin_min_cpus: {cfg.pin_min_cpus})", "cpus": len(cpus)}
    if not runner.which("taskset"):
        return {"applied": False, "why": "not applied: taskset (util-linux) not found", "cpus": len(cpus)}
    k = cfg.client_cpus
    return {"applied": True, "server_cpus": cpu_list(cpus[:-k]), "client_cpus": cpu_list(cpus[-k:]), "cpus": len(cpus), "how": "server: taskset -c in its argv; client: sched_setaffinity of the load generator's thread per point"}


def _share(cfg, runner, cpus: list[int], i: int, n: int) -> dict:
    """Part i of n (plan's share): nothing pinned unless every part has serving.telemetry.pin_min_cpus,
    rather than arms running at once on the same cores."""
    per = len(cpus) // n
    if per < cfg.pin_min_cpus:
        why = (f"not applied: {len(cpus)} cores split between {n} arms at once leave each {per}, under serving."
               f"telemetry.pin_min_cpus ({cfg.pin_min_cpus}): no arm is pinned, rather than arms on the same cores")
        return {"applied": False, "why": why, "cpus": len(cpus)}
    got = plan(cfg, runner, cpus[i * per:(i + 1) * per])
    return {**got, "share": f"part {i + 1} of {n}: {per} of {len(cpus)} cores"} if got["applied"] else got


def parse_cpu_list(text: str) -> set[int]:
    out: set[int] = set()
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def wrap(launch, aff: dict):
    """The launch with its argv under taskset when the plan pins (the recorded argv shows it)."""
    if not aff.get("applied") or not launch.spawned:  # a server parity does not start keeps its own cores
        return launch
    return replace(launch, argv=["taskset", "-c", aff["server_cpus"], *launch.argv])


NOT_APPLIED = "not applied"  # client_pinned's yield where pinning failed: "not applied: <why>"


@contextmanager
def client_pinned(aff: dict | None):
    """Pin the calling thread (the load generator) to the client cores; yield what it really got; restore."""
    if not aff or not aff.get("applied"):
        yield None
        return
    try:
        before = os.sched_getaffinity(0)
        os.sched_setaffinity(0, parse_cpu_list(aff["client_cpus"]))
        got = cpu_list(os.sched_getaffinity(0))
    except (OSError, ValueError) as e:
        yield f"{NOT_APPLIED}: {e}"
        return
    try:
        yield got
    finally:
        try:
            os.sched_setaffinity(0, before)
        except OSError:
            pass


def is_pinned(got: str | None) -> bool:
    """Whether client_pinned's yield is the cores it pinned the client to (None: no plan; NOT_APPLIED: it failed)."""
    return bool(got) and not got.startswith(NOT_APPLIED)


def of_pid(pid: int | None) -> str | None:
    if pid is None:
        return None
    try:
        return cpu_list(os.sched_getaffinity(pid))
    except OSError:
        return None
