"""The interpreter held for timing while requests are timed: the cyclic garbage collector off and
the thread switch interval short.

The collector: a full collection of the process's objects takes 2-4 ms on the 2-core box, and one
landing in the send loop or between a chunk's arrival and its timestamp shows up as a late send (an
open loop at 500 requests/s, 3,000 requests, read a worst send 10-22 ms late in 4 runs with the
collector running, 0.3 and 2.6 ms in 2 held: benchmarks/loadgen_overhead.py --gc).  On entry one
collection runs (untimed) and automatic collection is turned off; on the last exit it is turned back
on if it was on.  Reference counting still frees everything outside a cycle, so a run's memory grows
by no more than the cycles it makes.  Nothing is frozen: the CLI's own freeze of its imports
(parity.__main__) stays as it was.

The switch interval (sys.setswitchinterval, 5 ms by default): the load generator's event loop,
woken for a due send while another thread of the process (the telemetry sampler) runs Python, waits
for the interpreter lock until that thread is asked to drop it, up to the interval.  SWITCH_S while
held: the trace replay at 10x over 191 sends, the client on a core of its own, read p99 0.017-0.40 ms
in 6 quiet runs and 1.37 in a 7th at 5 ms; at 0.2 ms 0.023-0.25 ms in 8 (tests/integration/
test_replay_real.py).  Restored on the last exit.

Counted, so the two arms of a crossover (one thread each) may overlap."""

from __future__ import annotations

import gc
import sys
import threading
from contextlib import contextmanager

_lock = threading.Lock()
_holders = 0
_was_enabled = True
_was_interval = 0.005
SWITCH_S = 0.0002


@contextmanager
def held():
    global _holders, _was_enabled, _was_interval
    with _lock:
        if _holders == 0:
            _was_enabled, _was_interval = gc.isenabled(), sys.getswitchinterval()
            gc.collect()
            gc.disable()
            sys.setswitchinterval(SWITCH_S)
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0:
                sys.setswitchinterval(_was_interval)
                if _was_enabled:
                    gc.enable()
