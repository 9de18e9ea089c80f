"""The slurm host kind's check of its hosts.NAME section: slurm: defaulted, its waits bounded,
its time limit in a form sbatch takes."""

from __future__ import annotations

import math
import re

from parity.errors import ConfigError
from parity.runners.host_config import HostConfig, SlurmConfig

WAITS = ("poll_s", "pending_timeout_s", "controller_timeout_s", "kill_grace_s")
TIME_LIMIT = re.compile(r"\d+(-\d+)?(:\d+){0,2}|UNLIMITED|INFINITE")  # minutes, HH:MM:SS, D-HH:MM:SS


def check(host: HostConfig, label: str, key: str) -> None:
    host.slurm = host.slurm or SlurmConfig()
    for name in WAITS:
        v = getattr(host.slurm, name)
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise ConfigError(label, f"{key}.slurm.{name}", "must be a number of seconds > 0")
    if host.slurm.time is not None and not TIME_LIMIT.fullmatch(str(host.slurm.time)):
        raise ConfigError(label, f"{key}.slurm.time",
                          f"not a Slurm time limit (minutes, HH:MM:SS or D-HH:MM:SS): {host.slurm.time!r}")
