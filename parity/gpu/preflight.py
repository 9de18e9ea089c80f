"""The idle preflight: no GPU compute processes, no running docker container.

As in the users' harness (`docker ps -q | wc -l` must be 0), any running container
makes the GPU busy; lock.docker_busy_only_matching relaxes that to the containers
whose name or image contains the given text.

A tool that cannot answer (no nvidia-smi, a docker client without a daemon) is
reported in words and judged by policy (lock.nvidia_smi_missing /
lock.docker_no_daemon: idle | busy), never a crash.  The lock's own state is
judged by parity.gpu.lock; wait_and_acquire combines both."""

from __future__ import annotations

from parity.gpu.lock_config import LockConfig
from parity.gpu import docker, nvidia_smi


def gpu_check(runner, cfg: LockConfig) -> dict:
    apps, src = nvidia_smi.compute_apps(runner)
    if apps is None:
        idle = cfg.nvidia_smi_missing == "idle"
        return {"idle": idle, "apps": None, "source": src, "note": f"{src}: counted as {cfg.nvidia_smi_missing} (lock.nvidia_smi_missing)"}
    if not cfg.require_idle_gpu:
        return {"idle": True, "apps": apps, "source": src, "note": f"{len(apps)} compute process(es) via {src}, ignored (lock.require_idle_gpu: false)"}
    listed = ", ".join(f"{a['pid']} {a['name']}".strip() for a in apps[:5]) + (" ..." if len(apps) > 5 else "")
    note = f"{len(apps)} compute process(es) via {src}" + (f": {listed}" if apps else "")
    return {"idle": not apps, "apps": apps, "source": src, "note": note}


def docker_check(runner, cfg: LockConfig) -> dict:
    d = docker.running(runner)
    if d.state == "ok":
        only = cfg.docker_busy_only_matching
        busy = docker.matching(d, only)
        what = f"containers matching {only!r}" if only else "running containers"
        note = f"busy: {', '.join(busy)}" if busy else f"no {what} ({len(d.containers)} running)"
        ignored = [c for c in d.containers if c not in busy]
        if only and ignored:
            note += f"; ignored by lock.docker_busy_only_matching: {', '.join(ignored)}"
        return {"idle": not busy, "state": d.state, "containers": d.containers, "busy": busy, "note": note}
    if d.state == "no-cli":
        return {"idle": True, "state": d.state, "containers": [], "busy": [], "note": "docker not installed: no containers can run"}
    idle = cfg.docker_no_daemon == "idle"
    return {"idle": idle, "state": d.state, "containers": [], "busy": [], "note": f"{d.note}: counted as {cfg.docker_no_daemon} (lock.docker_no_daemon)"}


def preflight(runner, cfg: LockConfig) -> dict:
    """{"idle", "gpu_idle", "gpu", "docker_idle", "docker", "detail": {...}}; the notes are plain words."""
    if not cfg.preflight:
        return {"idle": True, "gpu_idle": True, "gpu": "not checked (lock.preflight: false)", "docker_idle": True, "docker": "not checked (lock.preflight: false)", "detail": {}}
    g = gpu_check(runner, cfg)
    d = docker_check(runner, cfg)
    return {
        "idle": g["idle"] and d["idle"],
        "gpu_idle": g["idle"],
        "gpu": g["note"],
        "docker_idle": d["idle"],
        "docker": d["note"],
        "detail": {"gpu": g, "docker": d},
    }
