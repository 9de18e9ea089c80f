"""The ssh host kind: the command runs over SSH in a parity that is synced there (parity.hosts.delegation)."""

from __future__ import annotations

from pathlib import Path

from parity.hosts.delegation import INTERRUPT_GRACE_S, Delegated, run_delegated
from parity.runners.ssh import SSHRunner


def delegate(host: str, profile, argv: list[str], local_root: Path, *, echo_stdout: bool = True, prefix: str = "", out=None) -> Delegated:
    runner = SSHRunner.for_host(host, profile)
    runner.interrupt_grace_s = INTERRUPT_GRACE_S
    try:
        return run_delegated(runner, argv, Path(local_root), echo_stdout, prefix, out)
    finally:
        runner.close()
