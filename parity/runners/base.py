"""The Runner protocol: the only way parity starts processes or moves files.

A Runner runs a command to completion (`run`), spawns a long-lived process in
its own process group with a bounded stop (`spawn`), and moves files
(`put`/`get`).  LocalRunner and SSHRunner implement it, which is what makes
`--host NAME` work for every command.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Protocol, runtime_checkable

LineCallback = Callable[[str, str], None]  # (stream: "stdout"|"stderr", line without newline)


@dataclass
class CommandResult:
    argv: list[str]
    rc: int | None  # None when killed for a timeout
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    env_overrides: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out

    def tail(self, n: int = 20) -> str:
        lines = (self.stdout + ("\n" if self.stdout and self.stderr else "") + self.stderr).splitlines()
        return "\n".join(lines[-n:])


@runtime_checkable
class Process(Protocol):
    pid: int
    argv: list[str]
    log_path: str | None

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int | None: ...

    def stop(self, grace_s: float = 10.0, leader_only: bool = False) -> int | None:
        """SIGTERM the whole process group (leader_only: its leader, a wrapper such as nsys that
        stops its own command), wait up to grace_s, then SIGKILL the group."""
        ...


@runtime_checkable
class Runner(Protocol):
    host: str  # "local" or the host name

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
        """Run to completion. stdin is /dev/null unless input_text is given.
        env holds overrides merged over the base environment; unset removes names."""
        ...

    def spawn(
        self,
        argv: list[str],
        *,
        env: Mapping[str, str] | None = None,
        unset: Iterable[str] = (),
        cwd: str | None = None,
        log_path: str | None = None,
    ) -> Process: ...

    def put(self, local_path: str, remote_path: str) -> None: ...

    def get(self, remote_path: str, local_path: str) -> None: ...

    def exists(self, path: str) -> bool: ...

    def read_text(self, path: str) -> str: ...

    def write_text(self, path: str, text: str) -> None: ...

    def which(self, name: str) -> str | None: ...
