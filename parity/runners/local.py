"""LocalRunner: subprocess in fresh process groups, bounded stops, tracked children.

Every child starts in its own session (process group).  Live groups are kept in
a registry so an interrupted parity run can stop all of them (`stop_all`).
Children die with parity (PR_SET_PDEATHSIG, see lifetime.py), and what escapes a
group (`setsid cmd &`) is found by its environment tag and stopped with it.
Group listeners (the GPU lock's owner record) hear when a group starts and ends.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterable, Mapping

from parity import openblas
from parity.runners import lifetime
from parity.runners.base import CommandResult, LineCallback
from parity.files import atomic_write_text

_live: dict[int, "LocalProcess"] = {}
_live_lock = threading.Lock()
_group_listeners: list = []  # fn(event: "start"|"end", pgid: int)
_tags = iter(range(1, 1 << 62))
PIPE_DRAIN_S = 5.0  # last resort: a pipe still open after the leader's tree was stopped


def add_group_listener(fn) -> None:
    _group_listeners.append(fn)


def remove_group_listener(fn) -> None:
    if fn in _group_listeners:
        _group_listeners.remove(fn)


def _notify(event: str, pgid: int) -> None:
    for fn in list(_group_listeners):
        try:
            fn(event, pgid)
        except Exception:  # a listener must never break a run (the lock reports its own problems)
            pass


def _new_tag() -> str:
    return f"{os.getpid()}.{next(_tags)}"


def _child_env(env: Mapping[str, str] | None, unset: Iterable[str], tag: str | None = None) -> dict[str, str]:
    merged = openblas.callers_environ()
    for name in unset:
        merged.pop(name, None)
    if env:
        merged.update({k: str(v) for k, v in env.items()})
    if tag:
        merged[lifetime.TAG_ENV] = tag
    else:
        merged.pop(lifetime.TAG_ENV, None)
    return merged


class _Spawner:
    """Starts children from one long-lived thread: the kernel sends PR_SET_PDEATHSIG when
    the parent THREAD ends, so a server spawned from a short-lived worker thread would die
    with that thread.  The main thread starts its children itself."""

    def __init__(self):
        self._lock = threading.Lock()
        self._jobs = None

    def popen(self, argv, **kw) -> subprocess.Popen:
        if threading.current_thread() is threading.main_thread():
            return subprocess.Popen(argv, **kw)
        import queue

        with self._lock:
            if self._jobs is None:
                self._jobs = queue.Queue()
                threading.Thread(target=self._serve, name="parity-spawner", daemon=True).start()
        done = threading.Event()
        box: dict = {}
        self._jobs.put((argv, kw, box, done))
        done.wait()
        if "error" in box:
            raise box["error"]
        return box["popen"]

    def _serve(self) -> None:
        while True:
            argv, kw, box, done = self._jobs.get()
            try:
                box["popen"] = subprocess.Popen(argv, **kw)
            except BaseException as e:  # handed back to the caller's thread
                box["error"] = e
            done.set()


_spawner = _Spawner()


def _popen(argv: list[str], *, tag: str | None, detached: bool = False, stable_thread: bool = False, **kw) -> subprocess.Popen:
    """Popen in a new session, tied to parity's life unless detached."""
    if detached:
        return subprocess.Popen(argv, start_new_session=True, **kw)
    setup = lifetime.child_setup(os.getpid())
    if stable_thread:
        return _spawner.popen(argv, start_new_session=True, preexec_fn=setup, **kw)
    return subprocess.Popen(argv, start_new_session=True, preexec_fn=setup, **kw)


def _kill_group(pid: int, sig: int, leader_only: bool = False) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        (os.kill if leader_only else os.killpg)(pid, sig)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def stop_group(popen: subprocess.Popen, grace_s: float, tag: str | None = None, leader_only: bool = False) -> int | None:
    """SIGTERM the group (leader_only: the leader alone, a wrapper that stops its own command),
    wait up to grace_s for the leader and the group, SIGKILL the rest and whatever carries the
    child's tag (escaped the group with setsid)."""
    pgid = popen.pid
    _kill_group(pgid, signal.SIGTERM, leader_only)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if popen.poll() is not None and not _group_alive(pgid):
            break
        time.sleep(0.05)
    lifetime.kill_tree(tag, pgid, exclude=popen.pid if popen.poll() is None else None)
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


class _Waitable:
    """poll/wait on a Popen (the pidfd wait of wait_exit)."""

    _popen: subprocess.Popen

    def poll(self) -> int | None:
        return self._popen.poll()

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            return wait_exit(self._popen, timeout)
        except subprocess.TimeoutExpired:
            return None


class LocalProcess(_Waitable):
    def __init__(self, popen: subprocess.Popen, argv: list[str], log_path: str | None, log_file, tag: str | None = None):
        self._popen = popen
        self.pid = popen.pid
        self.argv = argv
        self.log_path = log_path
        self._log_file = log_file
        self.tag = tag
        self._ended = False
        with _live_lock:
            _live[self.pid] = self
        _notify("start", self.pid)

    def _end(self) -> None:
        with _live_lock:
            _live.pop(self.pid, None)
            ended, self._ended = self._ended, True
        if not ended:
            _notify("end", self.pid)

    def stop(self, grace_s: float = 10.0, leader_only: bool = False) -> int | None:
        rc = stop_group(self._popen, grace_s, self.tag, leader_only)
        self._end()
        if self._log_file:
            self._log_file.close()
            self._log_file = None
        return rc


class DetachedProcess(_Waitable):
    """A child started to outlive parity (`parity build --detach`): no death signal, no tag."""

    def __init__(self, popen: subprocess.Popen, argv: list[str], log_path: str | None):
        self._popen, self.pid, self.argv, self.log_path = popen, popen.pid, argv, log_path

    def stop(self, grace_s: float = 10.0, leader_only: bool = False) -> int | None:
        return stop_group(self._popen, grace_s, leader_only=leader_only)


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
        tag = _new_tag()
        try:
            popen = _popen(
                argv,
                tag=tag,
                cwd=cwd,
                env=_child_env(env, unset, tag),
                stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except FileNotFoundError:
            return CommandResult(argv, 127, "", f"{argv[0]}: command not found", 0.0, env_overrides=dict(env or {}))
        except PermissionError:
            return CommandResult(argv, 126, "", f"{argv[0]}: permission denied", 0.0, env_overrides=dict(env or {}))
        proc = LocalProcess(popen, argv, None, None, tag)
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
            end = time.monotonic()
            # the leader is gone: what is left of its tree (its group, and what escaped it with
            # setsid) is an orphan that may hold the pipes -- stop it now, not PIPE_DRAIN_S later
            lifetime.kill_tree(tag, popen.pid if _group_alive(popen.pid) else None, exclude=popen.pid if popen.poll() is None else None)
            proc._end()
        for t in threads:
            t.join(timeout=PIPE_DRAIN_S)  # a pipe held by a process that dropped its tag: bounded
        decode = lambda name: b"".join(chunks[name]).decode("utf-8", "replace")  # noqa: E731
        return CommandResult(
            argv,
            None if timed_out else popen.returncode,
            decode("stdout"),
            decode("stderr"),
            end - start,
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
        detached: bool = False,
    ) -> LocalProcess:
        argv = [str(a) for a in argv]
        log_file = open(log_path, "ab") if log_path else None
        tag = None if detached else _new_tag()
        try:
            popen = _popen(
                argv,
                tag=tag,
                detached=detached,
                stable_thread=True,
                cwd=cwd,
                env=_child_env(env, unset, tag),
                stdin=subprocess.DEVNULL,
                stdout=log_file or subprocess.DEVNULL,
                stderr=subprocess.STDOUT if log_file else subprocess.DEVNULL,
            )
        except OSError:
            if log_file:
                log_file.close()
            raise
        if detached:  # meant to outlive this parity: not tracked, not stopped by stop_all
            if log_file:
                log_file.close()
            return DetachedProcess(popen, argv, log_path)
        return LocalProcess(popen, argv, log_path, log_file, tag)

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
        atomic_write_text(Path(os.path.expanduser(path)), text)

    def which(self, name: str) -> str | None:
        return shutil.which(name)
