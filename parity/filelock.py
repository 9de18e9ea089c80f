"""An exclusive lock on a file (fcntl.flock): one process at a time makes a cached thing
(a source tree, a model), the others wait and then find it made."""

from __future__ import annotations

import contextlib
import fcntl
import time
from pathlib import Path


class LockTimeout(TimeoutError):
    """Another process held the lock past the caller's timeout."""


@contextlib.contextmanager
def locked(path: str | Path, on_wait=None, timeout_s: float | None = None):
    """Hold path's lock for the block (released when the process dies, however it dies); yields
    the lock file, open for reading and appending.  on_wait(f), when given, is called once
    before blocking on a lock another holds.  timeout_s: give up after that long (LockTimeout).
    Not re-entrant: a second `locked` on the same path in the same process waits forever."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | (fcntl.LOCK_NB if on_wait or timeout_s is not None else 0))
        except BlockingIOError:
            if on_wait:
                on_wait(f)
            if timeout_s is None:
                fcntl.flock(f, fcntl.LOCK_EX)
            else:
                _wait(f, path, timeout_s)
        yield f


def _wait(f, path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise LockTimeout(f"{path}: held by another process for more than {timeout_s:g} s") from None
            time.sleep(0.05)
