"""--host NAME: run a command on a remote host (wired in the remote issue)."""

from __future__ import annotations

from parity.errors import UsageError


def refuse_or_delegate(host: str, profile) -> None:
    raise UsageError(f"--host {host}: remote runs are not available in this build; run locally or omit --host")
