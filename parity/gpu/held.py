"""Which GPU lock this process holds, and the refusal of preparation under it: builds, model
files and installs import this, not parity.gpu.lock, so a profile load stays cheap."""

from __future__ import annotations

from parity.errors import InfraError

_held: list[str] = []  # the dirs of the GPU locks this process took (parity.gpu.lock.holding)


def took(lock_dir: str) -> None:
    _held.append(lock_dir)


def gave_back(lock_dir: str) -> None:
    if lock_dir in _held:
        _held.remove(lock_dir)


def held_here() -> str | None:
    """The dir of the GPU lock this process took and still holds (None: none, or only inherited)."""
    return _held[-1] if _held else None


class PreparedUnderLock(InfraError):
    """A build, a model synthesis or an install started while this process holds the GPU lock."""


def refuse_while_held(what: str) -> None:
    """Preparation (builds, models, installs) runs before the lock (parity.session.prepare):
    a compile or a download must never hold the shared GPU.  Called where the work starts."""
    if lock_dir := held_here():
        raise PreparedUnderLock(f"internal: {what} started while this parity holds the GPU lock {lock_dir}; parity prepares everything before it locks (parity.session.prepare) -- a bug, please report it")
