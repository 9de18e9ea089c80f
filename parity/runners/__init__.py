"""Command runners (local, ssh) behind one protocol; see base.Runner."""

from __future__ import annotations


def get_runner(host: str | None = None, profile=None):
    """Runner for a host name: None/'local' -> LocalRunner, else SSH (lazy import)."""
    if host in (None, "", "local", "localhost"):
        from parity.runners.local import LocalRunner

        return LocalRunner()
    from parity.runners.ssh import SSHRunner  # noqa: F401  (paramiko imported lazily there)

    return SSHRunner.for_host(host, profile)
