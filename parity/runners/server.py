"""Server lifecycle, written once for every adapter: port check, spawn into the
run dir's log, bounded readiness, bounded stop of the whole process group."""

from __future__ import annotations

import asyncio
import socket
import time
from contextlib import contextmanager

from parity.errors import InfraError
from parity.runners.engines import Launch


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def _tail(path: str | None, n: int = 15) -> str:
    if not path:
        return ""
    try:
        return "\n".join(open(path, errors="replace").read().splitlines()[-n:])
    except OSError:
        return ""


def wait_ready(proc, port: int, launch: Launch, budget_s: float, probe_timeout_s: float, poll_s: float = 0.5) -> float:
    from parity.runners.http import request_json

    t0 = time.monotonic()
    last = "no answer yet"
    while time.monotonic() - t0 < budget_s:
        rc = proc.poll()
        if rc is not None:
            raise InfraError(f"server exited with code {rc} before becoming ready; log tail:\n{_tail(proc.log_path)}")
        try:
            status, body = asyncio.run(request_json("127.0.0.1", port, "GET", launch.ready_path, None, probe_timeout_s))
            if status == 200:
                return time.monotonic() - t0
            last = f"HTTP {status} {str(body)[:80]}"
        except (OSError, asyncio.TimeoutError, ValueError) as e:
            last = type(e).__name__
        time.sleep(poll_s)
    raise InfraError(f"server not ready within {budget_s:.0f} s on port {port} (last probe: {last}); log tail:\n{_tail(proc.log_path)}")


@contextmanager
def serving(ctx, launch: Launch, port: int, log_path: str, budget_s: float, probe_timeout_s: float, grace_s: float):
    if not port_free(port):
        raise InfraError(f"port {port} is already in use on 127.0.0.1: stop whatever holds it or set serving.port")
    proc = ctx.runner.spawn(launch.argv, env=launch.env, unset=launch.unset, log_path=log_path)
    try:
        ready_s = wait_ready(proc, port, launch, budget_s, probe_timeout_s)
        ctx.out.debug(f"server ready in {ready_s:.1f} s (pid {proc.pid})")
        yield proc, ready_s
    finally:
        proc.stop(grace_s)
