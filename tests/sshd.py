"""A real OpenSSH server on 127.0.0.1 for tests: throwaway host key and user
keys in a temp dir, a free port, `sshd -D -f <tmp config>`.

CI runs as root on a fresh machine (.ci/run installs openssh-server when
/usr/sbin/sshd is missing).  The login user is the current user; its shell
and HOME are the real ones, so a remote parity shares ~/.cache/parity.
"""

from __future__ import annotations

import getpass
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from ports import free_port

SSHD = "/usr/sbin/sshd"




def keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "parity-test", "-f", str(path)], check=True)
    return path


@dataclass
class Sshd:
    dir: Path
    port: int
    user: str
    user_key: Path  # authorized
    wrong_key: Path  # not authorized
    known_hosts: Path  # holds this server's host key
    ssh_config: Path  # Host local-ssh ... (for PARITY_SSH_CONFIG)
    proc: subprocess.Popen

    def host_entry(self, workdir: Path, **over) -> dict:
        """A profile `hosts:` entry for this server."""
        entry = {
            "hostname": "127.0.0.1",
            "port": self.port,
            "user": self.user,
            "identity_file": str(self.user_key),
            "known_hosts": str(self.known_hosts),
            "workdir": str(workdir),
            "python": sys.executable,
            "connect_timeout_s": 5.0,
        }
        entry.update(over)
        return entry

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def start_sshd(tmp: Path) -> Sshd:
    tmp.mkdir(parents=True, exist_ok=True)
    host_key = keygen(tmp / "host_ed25519")
    user_key = keygen(tmp / "user_ed25519")
    wrong_key = keygen(tmp / "wrong_ed25519")
    (tmp / "authorized_keys").write_text((tmp / "user_ed25519.pub").read_text())
    port = free_port()
    config = tmp / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\nPidFile {tmp / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {tmp / 'authorized_keys'}\nUsePAM no\nStrictModes no\nPermitRootLogin yes\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
        "Subsystem sftp internal-sftp\nMaxStartups 100\nMaxSessions 100\nLogLevel ERROR\n"
    )
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation dir
    log = open(tmp / "sshd.log", "ab")
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited {proc.returncode}: {(tmp / 'sshd.log').read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                if s.recv(64).startswith(b"SSH-2.0"):
                    break
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("sshd did not start listening within 10 s")
            time.sleep(0.1)
    pub = host_key.with_suffix(".pub").read_text().split()
    known = tmp / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {pub[0]} {pub[1]}\n")
    user = getpass.getuser()
    ssh_config = tmp / "ssh_config"
    ssh_config.write_text(
        f"Host local-ssh\n  HostName 127.0.0.1\n  Port {port}\n  User {user}\n  IdentityFile {user_key}\n"
        f"  UserKnownHostsFile {known}\n"
    )
    return Sshd(tmp, port, user, user_key, wrong_key, known, ssh_config, proc)
