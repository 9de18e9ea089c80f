"""Host kinds by name (hosts.NAME.kind): each ships one parity command to its host and pulls its
run directory back.  A new host kind is one module, its section check, and one line in each map here."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from parity.registry import Registry

if TYPE_CHECKING:  # the profile loader reads HOST_SECTIONS: delegation's imports stay out of it
    from parity.hosts.delegation import Delegated

# host kind (hosts.NAME.kind) -> "module:function" that runs the command there and pulls its run dir back
HOSTS = {"ssh": "parity.hosts.ssh:delegate", "slurm": "parity.hosts.slurm.job:delegate"}
# host kind -> its check of a hosts.NAME section, check(host, label, key) (a ConfigError on a bad value)
HOST_SECTIONS: Registry = Registry({"ssh": "parity.hosts.ssh_section:check",
                                    "slurm": "parity.hosts.slurm.section:check"})


def delegate(host: str, profile, argv: list[str], local_root: Path, *, echo_stdout: bool = True, prefix: str = "", out=None) -> Delegated:
    """Run argv on host (an SSH host, or a Slurm host: one batch job) and pull its run dir back."""
    cfg = profile.host(host) if profile is not None else None
    mod, fn = HOSTS[cfg.kind if cfg is not None else "ssh"].split(":")
    return getattr(importlib.import_module(mod), fn)(host, profile, argv, local_root, echo_stdout=echo_stdout, prefix=prefix, out=out)


def refuse_or_delegate(host: str, profile, argv: list[str], artifacts: Path) -> None:
    """Called by make_context when --host is given: run `argv` (the command line after `parity`)
    remotely, its run directory brought back under `artifacts`; exit with its code."""
    import typer

    res = delegate(host, profile, argv, artifacts)
    raise typer.Exit(res.rc)
