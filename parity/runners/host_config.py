"""The hosts section of a profile: how to reach a host (ssh) and how a kind: slurm host submits its job."""

from __future__ import annotations

from typing import Literal

import msgspec


class SlurmConfig(msgspec.Struct):
    """How a `kind: slurm` host submits its job (parity.hosts.slurm): sbatch options and bounds."""

    partition: str | None = None  # --partition; None: the cluster's default partition
    gres: str | None = None  # --gres, e.g. gpu:b200:1
    gpus: str | None = None  # --gpus, e.g. 1 or b200:1
    account: str | None = None  # --account
    qos: str | None = None  # --qos
    time: str | None = None  # --time (Slurm's forms: minutes, HH:MM:SS, D-HH:MM:SS)
    sbatch_args: list[str] = msgspec.field(default_factory=list)  # more sbatch options, e.g. [--exclusive, --constraint=b200]
    env: dict[str, str] = msgspec.field(default_factory=dict)  # environment of the Slurm commands, e.g. {SLURM_CONF: /etc/slurm-b/slurm.conf}
    poll_s: float = 10.0  # how often the job's state is read (scontrol show job)
    pending_timeout_s: float = 86400.0  # a job still pending after this is cancelled (exit 4)
    controller_timeout_s: float = 300.0  # how long the controller may stay unreachable while following (then exit 4)
    kill_grace_s: float = 120.0  # after scancel: how long to wait for the job to end (Slurm's KillWait and cleanup)


class HostConfig(msgspec.Struct):
    kind: Literal["ssh", "slurm"] = "ssh"  # slurm: submit a batch job (parity.hosts.slurm); ssh: run over SSH
    slurm: SlurmConfig | None = None  # the sbatch options of a kind: slurm host
    hostname: str = ""  # ssh: the host; slurm: the login node (empty: sbatch runs on this machine)
    user: str | None = None
    port: int = 22
    identity_file: str | None = None
    known_hosts: str | None = None  # default: ~/.ssh/known_hosts
    host_key_policy: Literal["reject", "accept-new"] = "reject"
    workdir: str = "~/parity-remote"  # where parity keeps its checkout/venv/runs remotely
    python: str = "python3"
    parity: str | None = None  # remote parity executable; None = bootstrap a venv in workdir
    connect_timeout_s: float = 10.0  # TCP connect, SSH banner, authentication, each channel open
    command_timeout_s: float = 86400.0  # the whole remote command (a delegated parity run)
    bootstrap_timeout_s: float = 600.0  # each step of the remote venv bootstrap (unpack, venv, pip, import check)
    keepalive_s: float = 15.0  # 0 = no keepalive
    lock_dir: str | None = None  # remote lock dir; default: the profile's lock.dir
