"""The cyclic garbage collector held off while requests are timed: a full collection of the
process's objects takes 2-4 ms on the 2-core box, and one landing in the send loop or between a
chunk's arrival and its timestamp shows up as a late send (the open loop's 10x replay read 2.6 and
3.6 ms once each on a quiet box, against ~0.01 ms for every other send).  On entry the live objects
are collected once and frozen (gc.freeze: later collections skip them) and automatic collection is
off; on the last exit both are undone.  Reference counting still frees everything that is not in a
cycle, so a run's memory does not grow by more than the cycles it makes.  Counted, so the two arms
of a crossover (one thread each) may overlap."""

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
            gc.freeze()
            gc.disable()
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0:
                gc.unfreeze()
                if _was_enabled:
                    gc.enable()
