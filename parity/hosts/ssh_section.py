"""The ssh host kind's check of its hosts.NAME section (kept apart from ssh.py: the profile loader
reads it, and ssh.py imports the SSH runner and the delegation)."""

from __future__ import annotations

from parity.errors import ConfigError
from parity.runners.host_config import HostConfig


def check(host: HostConfig, label: str, key: str) -> None:
    if host.slurm is not None:
        raise ConfigError(label, f"{key}.slurm", "only a kind: slurm host takes slurm: options")
