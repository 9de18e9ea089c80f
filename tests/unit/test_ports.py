"""The tests' port helper stays out of the ephemeral range that bind(0) and outgoing connections use."""

from __future__ import annotations

import socket
from pathlib import Path

from ports import free_port


def test_free_ports_bind_and_sit_below_the_ephemeral_range():
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for pair in (False, True):
        p = free_port(pair=pair)
        assert 10000 <= p and p + int(pair) < low
        for q in (p, p + 1) if pair else (p,):
            with socket.socket() as s:
                s.bind(("127.0.0.1", q))
