"""The cyclic garbage collector held off while requests are timed: a full collection of the
process's objects takes 2-4 ms on the 2-core box, and one landing in the send loop or between a
chunk's arrival and its timestamp shows up as a late send (an open loop at 500 requests/s, 3,000
requests, read a worst send 10-22 ms late in 4 runs with the collector running, 0.3 and 2.6 ms in 2
held: benchmarks/loadgen_overhead.py --gc).  On entry one collection runs (untimed) and automatic
collection is turned off; on the last exit it is turned back on if it was on.  Reference counting still frees everything outside a
cycle, so a run's memory grows by no more than the cycles it makes.  Nothing is frozen: the CLI's
own freeze of its imports (parity.__main__) stays as it was.  Counted, so the two arms of a
crossover (one thread each) may overlap."""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager

_lock = threading.Lock()
_holders = 0
_was_enabled = True


@contextmanager
def held():
    global _holders, _was_enabled
    with _lock:
        if _holders == 0:
            _was_enabled = gc.isenabled()
            gc.collect()
            gc.disable()
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _was_enabled:
                gc.enable()
