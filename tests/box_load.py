"""How much CPU work other than the test's own ran on the box while a measurement ran.

A few tests hold a measured figure to a few percent (the prefill line against the engine's own,
a capacity A/A): a physical property of a quiet box.  Beside other work it is not noise that moves
them but the work itself (host-side parsing that grows with the prompt slows with the cores it
shares), so such a test asserts its figure where the box was quiet and warns, with the number,
where it was not.  Other work = the box's busy CPU time (/proc/stat) minus this process's and its
reaped descendants' (os.times), in cores over the wall time."""

from __future__ import annotations

import os
import time

QUIET_CORES = 0.25  # an idle 2-core VM reads ~0.005; one `yes` hog 1.0


def _busy_s() -> float:
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait


def _own_s() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class OtherWork:
    """with OtherWork() as w: ... then w.cores (other work in cores) and w.quiet."""

    def __enter__(self) -> "OtherWork":
        self._busy, self._own, self._wall = _busy_s(), _own_s(), time.monotonic()
        self.cores: float | None = None
        return self

    def __exit__(self, *exc) -> None:
        wall = time.monotonic() - self._wall
        other = (_busy_s() - self._busy) - (_own_s() - self._own)
        self.cores = round(max(other, 0.0) / wall, 3) if wall > 0 else None

    @property
    def quiet(self) -> bool:
        return self.cores is not None and self.cores < QUIET_CORES

    def __str__(self) -> str:
        return f"other work on the box: {self.cores} cores (quiet below {QUIET_CORES})"
