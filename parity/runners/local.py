"""LocalRunner: subprocess in fresh process groups, bounded stops, tracked children.

Every child starts in its own session (process group).  Live groups are kept in
a registry so an interrupted parity run can stop all of them (`stop_all`).
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterable, Mapping

from parity.runners.base import CommandResult, LineCallback

_live: dict[int, "LocalProcess"] = {}
_live_lock = threading.Lock()


def _child_env(env: Mapping[str, str] | None, unset: Iterable[str]) -> dict[str, str]:
    merged = dict(os.environ)
    for name in unset:
        merged.pop(name, None)
    if env:
        merged.update({k: str(v) for k, v in env.items()})
    return merged


def _kill_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def stop_group(popen: subprocess.Popen, grace_s: float) -> int | None:
    """SIGTERM the group, wait up to grace_s for the leader and the group, SIGKILL the rest."""
    pgid = popen.pid
    _kill_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if popen.poll() is not None and not _group_alive(pgid):
            break
        time.sleep(0.05)
    _kill_group(pgid, signal.SIGKILL)
    try:
        return popen.wait(timeout=5)
    except subprocess.TimeoutExpired:
        return None


def stop_all(grace_s: float = 5.0) -> int:
    """Stop every process group this runner started and that is still alive."""
    with _live_lock:
        procs = list(_live.values())
    for p in procs:
        p.stop(grace_s)
    return len(procs)


class LocalProcess:
    def __init__(self, popen: subprocess.Popen, argv: list[str], log_path: str | None, log_file):
        self._popen = popen
        self.pid = popen.pid
        self.argv = argv
        self.log_path = log_path
        self._log_file = log_file
        with _live_lock:
            _live[self.pid] = self

    def poll(self) -> int | None:
        return self._popen.poll()

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            return wait_exit(self._popen, timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, grace_s: float = 10.0) -> int | None:
        rc = stop_group(self._popen, grace_s)
        with _live_lock:
            _live.pop(self.pid, None)
        if self._log_file:
            self._log_file.close()
            self._log_file = None
        return rc


def wait_exit(popen: subprocess.Popen, timeout: float | None) -> int:
    """popen.wait(timeout=...) sleeps in steps of up to 50 ms in CPython, which adds that
    much to every short command's duration; a pidfd wakes exactly at the exit."""
    try:
        fd = os.pidfd_open(popen.pid)
    except (AttributeError, OSError):  # not Linux >= 5.3, or already reaped
        return popen.wait(timeout=timeout)
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
    finally:
        os.close(fd)
    if not ready:
        raise subprocess.TimeoutExpired(popen.args, timeout)
    return popen.wait()


class LocalRunner:
    host = "local"

    def run(
        self,
        argv: list[str],
        *,
        env: Mapping[str, str] | None = None,
        unset: Iterable[str] = (),
        cwd: str | None = None,
        timeout: float | None = None,
        on_line: LineCallback | None = None,
        input_text: str | None = None,
    ) -> CommandResult:
        argv = [str(a) for a in argv]
        start = time.monotonic()
        try:
            popen = subprocess.Popen(
                argv,
                cwd=cwd,
                env=_child_env(env, unset),
                stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except FileNotFoundError:
            return CommandResult(argv, 127, "", f"{argv[0]}: command not found", 0.0, env_overrides=dict(env or {}))
        except PermissionError:
            return CommandResult(argv, 126, "", f"{argv[0]}: permission denied", 0.0, env_overrides=dict(env or {}))
        proc = LocalProcess(popen, argv, None, None)
        chunks: dict[str, list[bytes]] = {"stdout": [], "stderr": []}

        def pump(stream, name):
            for raw in iter(stream.readline, b""):
                chunks[name].append(raw)
                if on_line:
                    on_line(name, raw.decode("utf-8", "replace").rstrip("\r\n"))
            stream.close()

        threads = [
            threading.Thread(target=pump, args=(popen.stdout, "stdout"), daemon=True),
            threading.Thread(target=pump, args=(popen.stderr, "stderr"), daemon=True),
        ]
        for t in threads:
            t.start()
        if input_text is not None:
            try:
                popen.stdin.write(input_text.encode())
                popen.stdin.close()
            except BrokenPipeError:
                pass
        timed_out = False
        try:
            try:
                wait_exit(popen, timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                proc.stop(grace_s=2.0)
        except BaseException:
            proc.stop(grace_s=2.0)
            raise
        finally:
            with _live_lock:
                _live.pop(proc.pid, None)
        # a daemonised grandchild may keep the pipes open: do not wait for it forever
        for t in threads:
            t.join(timeout=5)
        if popen.poll() is not None and _group_alive(popen.pid):
            _kill_group(popen.pid, signal.SIGKILL)
        decode = lambda name: b"".join(chunks[name]).decode("utf-8", "replace")  # noqa: E731
        return CommandResult(
            argv,
            None if timed_out else popen.returncode,
            decode("stdout"),
            decode("stderr"),
            time.monotonic() - start,
            timed_out,
            dict(env or {}),
        )

    def spawn(
        self,
        argv: list[str],
        *,
        env: Mapping[str, str] | None = None,
        unset: Iterable[str] = (),
        cwd: str | None = None,
        log_path: str | None = None,
    ) -> LocalProcess:
        argv = [str(a) for a in argv]
        log_file = open(log_path, "ab") if log_path else None
        try:
            popen = subprocess.Popen(
                argv,
                cwd=cwd,
                env=_child_env(env, unset),
                stdin=subprocess.DEVNULL,
                stdout=log_file or subprocess.DEVNULL,
                stderr=subprocess.STDOUT if log_file else subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError:
            if log_file:
                log_file.close()
            raise
        return LocalProcess(popen, argv, log_path, log_file)

    def put(self, local_path: str, remote_path: str) -> None:
        if os.path.abspath(local_path) != os.path.abspath(remote_path):
            Path(remote_path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(local_path, remote_path)

    get = put

    def exists(self, path: str) -> bool:
        return os.path.exists(os.path.expanduser(path))

    def read_text(self, path: str) -> str:
        return Path(os.path.expanduser(path)).read_text()

    def write_text(self, path: str, text: str) -> None:
        from parity.artifacts import atomic_write_text

        atomic_write_text(Path(os.path.expanduser(path)), text)

    def which(self, name: str) -> str | None:
        return shutil.which(name)
