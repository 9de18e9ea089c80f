"""The lock section of a profile: the owner-file lock and the idle preflight."""

from __future__ import annotations

from typing import Literal

import msgspec

from parity.errors import ConfigError


class LockConfig(msgspec.Struct):
    RENAMED = {
        "docker_filter": "renamed to docker_busy_only_matching: by default ANY running container makes the GPU busy "
        "(the users' harness); set docker_busy_only_matching only to relax that to matching containers",
    }
    dir: str = "~/gpu_bench_lock"
    poll_s: float = 30.0
    timeout_s: float = 7200.0
    stale_age_s: float = 12 * 3600.0
    idle_checks: int = 2
    require_idle_gpu: bool = True  # false: GPU compute processes are reported but do not block
    preflight: bool = True  # false: lock only, no nvidia-smi/docker idle checks (lock tests)
    # the users' rule: ANY running container means busy (`docker ps -q | wc -l` must be 0).  A name/image
    # substring here RELAXES it: only matching containers count, every other one is ignored.
    docker_busy_only_matching: str | None = None
    docker_no_daemon: Literal["idle", "busy"] = "idle"
    nvidia_smi_missing: Literal["idle", "busy"] = "idle"
    run_timeout_s: float = 12 * 3600.0  # `parity lock run -- CMD`: the command is stopped after this
    reclaim_wait_s: float = 60.0  # a reclaimer waits this long for a dead holder's process group to be gone


def check_lock(lock: LockConfig, label: str, key: str) -> None:
    if lock.idle_checks < 1:
        raise ConfigError(label, f"{key}.idle_checks", "must be at least 1")
