"""Local TCP ports: whether one is free on 127.0.0.1, and who listens on it (from /proc)."""

from __future__ import annotations

import os
import socket

from parity.errors import InfraError


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def parse_proc_net_tcp(text: str, port: int) -> list[int]:
    """Socket inodes LISTENing on `port` in a /proc/net/tcp{,6} table."""
    inodes = []
    for line in text.splitlines()[1:]:
        f = line.split()
        if len(f) < 10:
            continue
        local, state = f[1], f[3]
        if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
            inodes.append(int(f[9]))
    return inodes


def port_holder(port: int) -> str | None:
    """'pid 123 (llama-server -m ...)' for the process listening on port, when /proc tells."""
    inodes: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                inodes.update(parse_proc_net_tcp(f.read(), port))
        except OSError:
            continue
    if not inodes:
        return None
    targets = {f"socket:[{i}]" for i in inodes}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in targets:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
                    return f"pid {pid} ({cmd[:120].strip()})"
            except OSError:
                continue
    return "a process this user cannot inspect"


def port_problem(port: int) -> str | None:
    """'port N on 127.0.0.1 is already in use by <who>', None: free."""
    if port_free(port):
        return None
    who = port_holder(port)
    return f"port {port} on 127.0.0.1 is already in use{' by ' + who if who else ''}"


def check_port(port: int) -> None:
    if problem := port_problem(port):
        raise InfraError(f"{problem}: stop it or set serving.port")
