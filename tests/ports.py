"""Free TCP ports for the servers the tests start, taken below the kernel's ephemeral range.

A `bind(0)` port is ephemeral: between the check and the server's own bind, any process's
outgoing connection or `bind(0)` may take it (a bytecode-on run saw vLLM's engine core hold
the port test_real_engine had just chosen; parity rightly refused to start on it)."""

from __future__ import annotations

import random
import socket
from pathlib import Path


def _below_ephemeral() -> tuple[int, int]:
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return 10000, max(10001, min(low, 65536) - 1)


def free_port(pair: bool = False) -> int:
    """A port that binds now (pair: p and p + 1 both do), chosen at random below the ephemeral range."""
    lo, hi = _below_ephemeral()
    rng = random.SystemRandom()
    for _ in range(500):
        p = rng.randint(lo, hi - 1)
        if all(_binds(q) for q in ((p, p + 1) if pair else (p,))):
            return p
    raise RuntimeError(f"no free port in {lo}-{hi}")


def _binds(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
