"""One OpenBLAS thread in parity's own process.  parity's statistics work on a few hundred
numbers, while OpenBLAS (numpy's and scipy's each load one) starts a thread per core when it
loads, and those threads spin before they sleep: on the box parity measures, beside the engine.
`limit()` runs first in a parity process; what parity starts, and what its manifest records,
get the caller's environment back (`callers_environ`), so an engine built with OpenBLAS keeps
its threads."""

from __future__ import annotations

import os

NAME = "OPENBLAS_NUM_THREADS"
_set_here = False


def limit() -> None:
    """One OpenBLAS thread from here on, unless the caller chose a number."""
    global _set_here
    if NAME not in os.environ:
        os.environ[NAME] = "1"
        _set_here = True


def callers_environ() -> dict[str, str]:
    """os.environ as the caller set it: without what limit() added."""
    env = dict(os.environ)
    if _set_here and env.get(NAME) == "1":
        del env[NAME]
    return env
