"""Server lifecycle, written once for every engine kind: port check (naming who
holds it), spawn into the run dir's log, bounded readiness (per-probe timeout,
overall budget, early-exit detection), bounded stop of the whole process group.
A server parity does not start (an endpoint) skips the port check and the spawn: its
own start command may run instead, and its stop command after."""

from __future__ import annotations

import asyncio
import shlex
import time
from contextlib import contextmanager

from parity.context import Run
from parity.errors import InfraError
from parity.ports import check_port
from parity.engines.base import Launch
from parity.loadgen.http import HttpError
from parity.loadgen.http import request_json, request_text


def log_tail(path: str | None, n: int = 15) -> str:
    if not path:
        return ""
    try:
        with open(path, errors="replace") as f:
            return "\n".join(f.read().splitlines()[-n:])
    except OSError:
        return ""


def probe(port: int, path: str, timeout: float, host: str = "127.0.0.1") -> tuple[int, object]:
    return asyncio.run(request_json(host, port, "GET", path, None, timeout))


def wait_ready(proc, port: int, launch: Launch, budget_s: float, probe_timeout_s: float, poll_s: float = 0.5) -> float:
    """Probe launch.ready_path until HTTP 200 (then check the served model is
    listed), at most budget_s; the server exiting first is an InfraError."""
    t0 = time.monotonic()
    attempts, last = 0, "no answer yet"
    while True:
        rc = proc.poll()
        if rc is not None:
            who = (launch.engine or "server") if launch.spawned else f"{launch.engine}'s start command ({shlex.join(launch.start)[:120]})"
            raise InfraError(f"{who} exited {exit_words(rc)} before becoming ready; log tail:\n{log_tail(proc.log_path)}")
        if time.monotonic() - t0 >= budget_s:
            break
        attempts += 1
        try:
            status, body = probe(port, launch.ready_path, probe_timeout_s, launch.host)
            if status == 200:
                _check_models(port, launch, probe_timeout_s, proc)
                return time.monotonic() - t0
            last = f"HTTP {status} {str(body)[:80]}"
        except (OSError, asyncio.TimeoutError, ValueError, HttpError) as e:  # e.g. a server dying mid-answer
            last = type(e).__name__
        time.sleep(min(poll_s, max(0.0, budget_s - (time.monotonic() - t0))))
    raise InfraError(
        f"{launch.engine or 'server'} not ready within {budget_s:g} s on port {port} ({attempts} probes, last: {last}); "
        f"raise engines.{launch.engine or 'X'}.ready_timeout_s if it needs longer; log tail:\n{log_tail(proc.log_path)}"
    )


def _check_models(port: int, launch: Launch, timeout: float, proc) -> None:
    if not launch.models_path:
        return
    status, body = probe(port, launch.models_path, timeout, launch.host)
    ids = [m.get("id") for m in body.get("data", [])] if status == 200 and isinstance(body, dict) else []
    if launch.served_name not in ids:
        raise InfraError(f"{launch.engine} is up but does not serve {launch.served_name!r} (GET {launch.models_path}: HTTP {status}, models {ids}); log tail:\n{log_tail(proc.log_path)}")


def answering(launch: Launch, timeout: float) -> str:
    """A server probed once at its readiness path: 'HTTP 200' (or its status), or why no answer."""
    try:
        status, _ = probe(launch.port, launch.ready_path, timeout, launch.host)
    except (OSError, asyncio.TimeoutError, ValueError, HttpError) as e:
        return f"no ({type(e).__name__})"
    return f"HTTP {status}"


def scrape(port: int, path: str | None, timeout: float = 10.0, host: str = "127.0.0.1") -> str | None:
    """The server's metrics text (None when it has no such endpoint or fails)."""
    if not path:
        return None

    try:
        status, text = asyncio.run(request_text(host, port, path, timeout))
    except (OSError, asyncio.TimeoutError, ValueError, HttpError):
        return None
    return text if status == 200 else None


@contextmanager
def serving(run: Run, launch: Launch, port: int, log_path: str, budget_s: float, probe_timeout_s: float, grace_s: float,
            leader_only: bool = False):
    """Start the server with the run's runner, wait until ready, yield (process, ready_seconds),
    always stop it (leader_only: the stop signal goes to the launched wrapper alone, see Process.stop)."""
    if not launch.spawned:
        with external(run, launch, log_path, grace_s) as proc:
            yield proc, wait_ready(proc, launch.port, launch, budget_s, probe_timeout_s)
        return
    check_port(port)
    proc = run.runner.spawn(launch.argv, env=launch.env, unset=launch.unset, log_path=log_path)
    try:
        ready_s = wait_ready(proc, port, launch, budget_s, probe_timeout_s)
        run.out.debug(f"{launch.engine} ready in {ready_s:.1f} s (pid {proc.pid})")
        try:
            yield proc, ready_s
        except (OSError, HttpError, asyncio.TimeoutError) as e:
            rc = proc.poll()
            if rc is None:
                raise
            # what the client saw (a refused connection) is not the news: the server died
            raise died(launch.engine or "server", rc, proc.log_path, f"serving (the client then saw {type(e).__name__})") from e
    finally:
        proc.stop(grace_s, leader_only=leader_only)


def died(engine: str, rc: int, log_path: str | None, during: str) -> InfraError:
    """The error for a server that exited while in use: how, when, and where its log is."""
    last = last_words(log_tail(log_path, 20)) or "empty"
    return InfraError(f"{engine} server exited {exit_words(rc)} during {during}; log: {log_path} (last line: {last[:160]})")


def last_words(tail: str) -> str:
    """A dying server's last line with text in it: llama-server's timestamped prefix (`0.17.578.263 E `)
    alone is no line, and its abort (`ggml-cuda.cu:104: CUDA error`) is often the last one written."""
    import re

    for line in reversed(tail.splitlines()):
        if re.sub(r"^\d+\.\d+\.\d+\.\d+ [A-Z] ?", "", line).strip():
            return line.strip()
    return ""


def exit_words(rc: int) -> str:
    """'with code 3' or 'on signal 11 (SIGSEGV)' for a Popen return code."""
    import signal

    if rc < 0:
        try:
            return f"on signal {-rc} ({signal.Signals(-rc).name})"
        except ValueError:
            return f"on signal {-rc}"
    return f"with code {rc}"


class External:
    """A server parity did not start: never 'exited' (its process is not ours), no pid (memory
    per process does not apply), its own start command's process stopped at the end."""

    pid = None

    def __init__(self, started=None, log_path: str | None = None):
        self.started, self.log_path = started, log_path

    def poll(self):
        """The start command's exit code when it failed (a start command may also return 0 once
        its server runs, e.g. `docker run -d`); None otherwise."""
        rc = self.started.poll() if self.started is not None else None
        return rc if rc not in (None, 0) else None

    def stop(self, grace_s: float, leader_only: bool = False) -> None:
        if self.started is not None:
            self.started.stop(grace_s)


@contextmanager
def external(run: Run, launch: Launch, log_path: str, grace_s: float):
    """An endpoint's lifecycle: its start command (when it has one) before, its stop command after."""
    try:
        started = run.runner.spawn(launch.start, env=launch.env, unset=launch.unset, log_path=log_path) if launch.start else None
    except OSError as e:
        raise InfraError(f"{launch.engine}'s start command ({shlex.join(launch.start)[:120]}) cannot run: {e.strerror or e}") from None
    proc = External(started, log_path if started else None)
    try:
        yield proc
    finally:
        try:
            if launch.stop:
                run_stop(run, launch, log_path, max(grace_s, 1.0) * 4, started, grace_s)
        finally:
            proc.stop(grace_s)


def run_stop(run: Run, launch: Launch, log_path: str, timeout: float, started, grace_s: float) -> None:
    """An endpoint's stop command, its output appended to the server's log.  Meanwhile the start
    command's process is reaped: a stop script that waits for that pid to go must see it go (an
    unreaped child stays a zombie, alive to `kill -0`)."""
    try:
        stopper = run.runner.spawn(launch.stop, env=launch.env, unset=launch.unset, log_path=log_path)
    except OSError as e:
        run.out.warn(f"{launch.engine}: its stop command ({shlex.join(launch.stop)[:120]}) cannot run: {e.strerror or e}")
        return
    deadline = time.monotonic() + timeout
    while (rc := stopper.poll()) is None and time.monotonic() < deadline:
        if started is not None:
            started.poll()
        time.sleep(0.1)
    if rc is None:
        stopper.stop(grace_s)
        run.out.warn(f"{launch.engine}: its stop command did not end within {timeout:g} s and was stopped; log: {log_path}")
    elif rc != 0:
        run.out.warn(f"{launch.engine}: its stop command exited {exit_words(rc)}; log tail: {log_tail(log_path, 2)}")
