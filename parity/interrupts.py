"""Signals parity's handler has seen this run.  The handler turns the first SIGINT/SIGTERM/SIGHUP
into a KeyboardInterrupt where the main thread happens to be, and that can be swallowed there (a
finalizer, a callback that catches everything: seen once as a snapshot that kept adding blocks
after Ctrl-C).  Long loops call check() at their boundaries, so an interrupt is never lost."""

from __future__ import annotations

_seen: list[int] = []


def note(signum: int) -> None:
    _seen.append(signum)


def reset() -> None:
    _seen.clear()


def check() -> None:
    """Raise KeyboardInterrupt if a signal came in this run (whether or not its first raise got through)."""
    if _seen:
        raise KeyboardInterrupt(f"signal {_seen[0]}")
