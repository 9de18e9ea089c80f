"""Where a Slurm host's commands run: its login node over SSH (hosts.NAME.hostname set),
or this machine (no hostname: this machine has the Slurm client commands and sees
hosts.NAME.workdir, the filesystem the compute nodes share).  Either way a Runner
with the few file operations the bootstrap and the run-dir pull use."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from parity.decode import replace
from parity.runners.local import LocalRunner
from parity.runners.ssh import SSHRunner


class LocalLogin(LocalRunner):
    """This machine as the login node: sbatch runs here, files are plain files."""

    def __init__(self, name: str, cfg):
        self.host, self.cfg = name, cfg
        self.interrupt_grace_s = 30.0

    @property
    def target(self) -> str:
        return "localhost"

    def expand(self, path: str) -> str:
        return os.path.expanduser(str(path))

    def makedirs(self, path: str) -> None:
        Path(self.expand(path)).mkdir(parents=True, exist_ok=True)

    def put_bytes(self, data: bytes, path: str) -> None:
        p = Path(self.expand(path))
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)

    def get(self, remote_path: str, local_path: str) -> None:
        src = Path(self.expand(remote_path))
        if src.is_dir():
            shutil.copytree(src, local_path, dirs_exist_ok=True, symlinks=True)
        else:
            LocalRunner.put(self, str(src), local_path)

    def close(self) -> None:
        pass


def login_runner(name: str, cfg):
    """The runner for a kind: slurm host's login side."""
    if cfg.hostname:
        ssh_cfg = replace(cfg)
        for attr in ("identity_file", "known_hosts"):
            if getattr(ssh_cfg, attr):
                setattr(ssh_cfg, attr, os.path.expanduser(os.path.expandvars(getattr(ssh_cfg, attr))))
        return SSHRunner(name, ssh_cfg)
    return LocalLogin(name, cfg)
