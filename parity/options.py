"""Value checks shared by every option, flag and campaign step: one meaning, one message."""

from __future__ import annotations

import math

from parity.errors import ConfigError, UsageError


def positive_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def positive_seconds(value, name: str) -> float:
    """A CLI/step timeout: a finite number of seconds > 0 (else a one-line UsageError naming it)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{name} {value!r}: not a number of seconds") from None
    if not math.isfinite(v) or v <= 0:
        raise UsageError(f"{name} {value!r}: must be a finite number of seconds > 0")
    return v


def check_step_options(kind: str, options: dict, known: set[str]) -> None:
    """A campaign step's `with:` names only options its kind knows (typos fail before anything runs)."""
    bad = set(options) - known
    if bad:
        raise ConfigError("campaign", f"with.{sorted(bad)[0]}", f"unknown {kind} option (known: {', '.join(sorted(known))})")
