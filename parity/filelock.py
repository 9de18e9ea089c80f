"""Inter-process locks on files (the `filelock` library: flock on a lock file that stays in
place), and `updating`: the one way parity changes a file other parity processes may change
at the same time (the lever map, the ledger, the series registry): lock, read, write a
temporary beside it, replace it whole."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Callable, Iterator

from parity.files import atomic_write_text, fsync_dir


class LockTimeout(TimeoutError):
    """Another process held the lock past the caller's timeout."""


@contextlib.contextmanager
def locked(path: str | Path, on_wait: Callable[[Path], None] | None = None, timeout_s: float | None = None) -> Iterator[Path]:
    """Hold the lock file `path` for the block (the kernel drops it when the process dies,
    however it dies); yields path, which the holder may write a note into (waiters read it).
    on_wait(path), when given, is called once before blocking on a lock another holds;
    timeout_s: give up after that long (LockTimeout).  Re-entrant within one thread; other
    threads and processes wait."""
    from filelock import FileLock, Timeout

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # the path stays on release: every holder, and plain flock users of it, lock one inode
    lock = FileLock(str(path), is_singleton=True, preserve_lock_file=True)
    try:
        lock.acquire(blocking=on_wait is None and timeout_s is None)
    except Timeout:
        if on_wait is not None:
            on_wait(path)
        try:
            lock.acquire(timeout=-1 if timeout_s is None else timeout_s)
        except Timeout:
            raise LockTimeout(f"{path}: held by another process for more than {timeout_s:g} s") from None
    try:
        yield path
    finally:
        lock.release()


def lock_path(path: str | Path) -> Path:
    """The lock file of a shared file: hidden, beside it (the same directory, so the lock is
    where the file is, also on a shared filesystem)."""
    p = Path(path)
    return p.with_name(f".{p.name}.lock")


@contextlib.contextmanager
def updating(path: str | Path) -> Iterator[Callable[[str], None]]:
    """Lock `path` (its lock_path) for a read-modify-write; yields write(text), which replaces
    the file atomically keeping its mode (parity.files.atomic_write_text).  Temporaries a
    killed writer left beside it are removed: no writer is between its write and its rename
    while this one holds the lock."""
    target = Path(os.path.realpath(path))  # a symlinked file is updated where it lives
    with locked(lock_path(target)):
        for stale in target.parent.glob(f".{target.name}.*.tmp"):
            with contextlib.suppress(OSError):
                stale.unlink()

        def write(text: str) -> None:
            atomic_write_text(target, text)
            fsync_dir(target.parent)  # the rename on disk too: a power loss keeps the new file

        yield write


@contextlib.contextmanager
def locked_dir(path: str | Path) -> Iterator[None]:
    """flock on a directory itself (no lock file in it: a run directory's listing stays what
    the run wrote); threads and processes wait on each other."""
    fd = os.open(str(path), os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the flock
