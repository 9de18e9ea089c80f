"""A real single-node Slurm on localhost for tests: munged, slurmctld -D and slurmd -D
with a slurm.conf in a temp dir (Debian's slurm-wlm 22.05 and munge; no systemd, no
cgroups, no slurmdbd), on a free port pair so a real installation is not disturbed.
The client commands find it through SLURM_CONF (set in os.environ while it runs, so
every parity subprocess of a test reaches it).

Accounting: none (no slurmdbd), so `sacct` answers "accounting storage is disabled";
finished jobs stay visible to `scontrol show job` for MinJobAge (an hour here), which
is what parity follows.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

PARTITION = "parity"


def free_port_pair() -> int:
    """A port p with p and p+1 both free (slurmctld, slurmd)."""
    from ports import free_port

    return free_port(pair=True)


def node_line() -> tuple[str, str]:
    """(node name, `slurmd -C` hardware line) of this machine."""
    out = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, timeout=30).stdout
    line = out.splitlines()[0]
    name = line.split()[0].split("=", 1)[1]
    return name, line


@dataclass
class Slurm:
    dir: Path
    conf: Path
    port: int
    node: str
    partition: str = PARTITION
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def cmd(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env={**os.environ, **self.env})

    def jobs(self) -> list[str]:
        """Ids of jobs Slurm still has pending, running or completing."""
        r = self.cmd("squeue", "-h", "-o", "%i")
        return r.stdout.split()

    def stop_ctld(self) -> None:
        self._stop("slurmctld")

    def start_ctld(self) -> None:
        self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
        self._await_node()

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.dir / f"{name}.out", "ab")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, env={**os.environ, **self.env})

    def _stop(self, name: str) -> None:
        p = self.procs.pop(name, None)
        if p is None:
            return
        p.terminate()
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)

    def _await_node(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited {p.returncode}: {(self.dir / f'{name}.out').read_text()[-1500:]}")
            r = self.cmd("sinfo", "-h", "-N", "-o", "%T", timeout=20)
            last = (r.stdout + r.stderr).strip()
            if r.returncode == 0 and last.rstrip("*") in ("idle", "mixed", "allocated"):
                return
            time.sleep(0.5)
        raise RuntimeError(f"the Slurm node did not come up within {timeout:g} s (sinfo: {last!r})")

    def stop(self) -> None:
        r = self.cmd("squeue", "-h", "-o", "%i") if "slurmctld" in self.procs else None
        if r is not None and r.stdout.split():
            self.cmd("scancel", *r.stdout.split())
        for name in ("slurmd", "slurmctld", "munged"):
            self._stop(name)


def start_slurm(base: Path | None = None) -> Slurm:
    """Start munged, slurmctld and slurmd; return once the node is idle.  The directory
    must be world-executable all the way down (munged checks its socket's directory)."""
    d = Path(tempfile.mkdtemp(prefix="parity-slurm-", dir=base))
    d.chmod(0o755)
    for sub in ("state", "spool", "log"):
        (d / sub).mkdir()
    key = d / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    sock = d / "munge.sock"
    node, hw = node_line()
    port = free_port_pair()
    conf = d / "slurm.conf"
    hw_fields = " ".join(f for f in hw.split()[1:] if not f.startswith(("UpTime", "Boards")))
    conf.write_text(
        f"ClusterName=parity-test\nSlurmctldHost={node}(127.0.0.1)\nSlurmUser=root\nSlurmdUser=root\n"
        f"SlurmctldPort={port}\nSlurmdPort={port + 1}\n"
        f"AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket={sock}\n"
        f"StateSaveLocation={d / 'state'}\nSlurmdSpoolDir={d / 'spool'}\n"
        f"SlurmctldPidFile={d / 'slurmctld.pid'}\nSlurmdPidFile={d / 'slurmd.pid'}\n"
        f"SlurmctldLogFile={d / 'log' / 'slurmctld.log'}\nSlurmdLogFile={d / 'log' / 'slurmd.log'}\n"
        "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nMpiDefault=none\nSwitchType=switch/none\n"
        "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
        "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\nJobCompType=jobcomp/none\n"
        "MinJobAge=3600\nKillWait=15\nOverTimeLimit=0\nInactiveLimit=0\nReturnToService=2\n"
        "SchedulerType=sched/backfill\nSchedulerParameters=sched_interval=2\n"
        f"NodeName={node} NodeAddr=127.0.0.1 {hw_fields} State=UNKNOWN\n"
        f"PartitionName={PARTITION} Nodes={node} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO\n"
    )
    s = Slurm(d, conf, port, node)
    s._spawn("munged", ["munged", "-F", f"--key-file={key}", f"--socket={sock}", f"--pid-file={d / 'munged.pid'}",
                        f"--log-file={d / 'log' / 'munged.log'}", f"--seed-file={d / 'munged.seed'}"])
    deadline = time.monotonic() + 20
    while not sock.exists():
        if time.monotonic() > deadline or s.procs["munged"].poll() is not None:
            s.stop()
            raise RuntimeError(f"munged did not start: {(d / 'munged.out').read_text()[-1500:]}")
        time.sleep(0.1)
    s._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(conf)])
    s._spawn("slurmd", ["slurmd", "-D", "-f", str(conf)])
    try:
        s._await_node()
    except Exception:
        s.stop()
        raise
    return s


def remove(s: Slurm) -> None:
    shutil.rmtree(s.dir, ignore_errors=True)
