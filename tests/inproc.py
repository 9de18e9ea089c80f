"""The real CLI in this process (parity.cli.main): ~50 ms a command instead of ~1 s for a
subprocess, for the tests that run many commands (the fuzzing, the closed-world cases)."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass


@dataclass
class Result:
    rc: int
    out: str
    err: str

    def error_lines(self) -> list[str]:
        return [ln for ln in self.err.splitlines() if ln.startswith("parity: error:")]


def cli(*args: str) -> Result:
    from parity.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in args])
    return Result(rc, out.getvalue(), err.getvalue())
