"""An exclusive lock on a file (fcntl.flock): one process at a time makes a cached thing
(a source tree, a model), the others wait and then find it made."""

from __future__ import annotations

import contextlib
import fcntl
from pathlib import Path


@contextlib.contextmanager
def locked(path: str | Path, on_wait=None):
    """Hold path's lock for the block (released when the process dies, however it dies); yields
    the lock file, open for reading and appending.  on_wait(f), when given, is called once
    before blocking on a lock another holds.  Not re-entrant: a second `locked` on the same
    path in the same process waits forever."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | (fcntl.LOCK_NB if on_wait else 0))
        except BlockingIOError:
            on_wait(f)
            fcntl.flock(f, fcntl.LOCK_EX)
        yield f
