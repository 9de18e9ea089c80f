"""Which requests of a trace a run replays, and when: a window of the trace's time, a seeded
sample of whole sessions, the requests no engine of the run can hold left out, the time
scaled.  Pure and seeded: the same trace and options give the same requests on every engine
of a block and in every block.

A session is the trace's own (BurstGPT_3's Session ID, Bailian's root chat); where the trace
has hash ids and no sessions (Mooncake), the requests under one hash id after the prefix
every request shares (a system prompt) form one; otherwise each request is its own."""

from __future__ import annotations

import random

import msgspec

from parity.errors import UsageError
from parity.replay.record import Trace, TraceRequest


class Selection(msgspec.Struct, frozen=True):
    """The requests to replay, times from the first one in trace seconds (not yet scaled)."""

    requests: tuple[TraceRequest, ...]
    notes: dict = msgspec.field(default_factory=dict)  # what was kept and left out, by what rule


def common_prefix(requests) -> int:
    """How many leading hash ids every request with hash ids shares."""
    ids = [r.hash_ids for r in requests if r.hash_ids]
    if not ids:
        return 0
    n = min(len(h) for h in ids)
    for k in range(n):
        if any(h[k] != ids[0][k] for h in ids):
            return k
    return n


def session_keys(requests) -> list[str]:
    """Each request's session (see the module's doc)."""
    shared = common_prefix(requests)
    out = []
    for r in requests:
        if r.session is not None:
            out.append(f"s:{r.session}")
        elif r.hash_ids and len(r.hash_ids) > shared:
            out.append(f"h:{r.hash_ids[shared]}")
        else:
            out.append(f"r:{r.line}")
    return out


def select(trace: Trace, start_s: float = 0.0, duration_s: float | None = None, sessions: int | None = None,
           seed: int = 0, max_request_tokens: int | None = None) -> Selection:  # fmt: skip
    """The window [start_s, start_s + duration_s) of trace time, then `sessions` whole sessions
    drawn with `seed` (None: all), then those needing more than max_request_tokens (input +
    output) left out; times from the first request kept."""
    reqs = [r for r in trace.requests if r.at_s >= start_s and (duration_s is None or r.at_s < start_s + duration_s)]
    notes: dict = {"format": trace.format, "in_file": len(trace.requests), "left_out_on_reading": dict(trace.dropped),
                   "in_window": len(reqs)}
    if not reqs:
        raise UsageError(f"{trace.source}: no request in the window start_s {start_s:g} s, duration_s {duration_s} "
                         f"(the trace spans {trace.requests[-1].at_s:g} s)")  # fmt: skip
    keys = session_keys(reqs)
    order = list(dict.fromkeys(keys))
    notes["sessions_in_window"] = len(order)
    if sessions is not None:
        if sessions > len(order):
            raise UsageError(f"{trace.source}: sessions {sessions} but the window holds {len(order)}")
        chosen = set(random.Random(seed).sample(order, sessions))
        reqs = [r for r, k in zip(reqs, keys) if k in chosen]
        notes["sessions"] = sessions
    if max_request_tokens is not None:
        long = [r for r in reqs if r.input_tokens + r.output_tokens > max_request_tokens]
        if long:
            notes["left_out_too_long"] = {"requests": len(long), "max_request_tokens": max_request_tokens,
                                          "longest": max(r.input_tokens + r.output_tokens for r in long)}  # fmt: skip
        reqs = [r for r in reqs if r.input_tokens + r.output_tokens <= max_request_tokens]
        if not reqs:
            raise UsageError(f"{trace.source}: every selected request needs more than max_request_tokens "
                             f"{max_request_tokens}")
    t0 = reqs[0].at_s
    kept = tuple(msgspec.structs.replace(r, at_s=round(r.at_s - t0, 6)) for r in reqs)
    notes["requests"] = len(kept)
    return Selection(kept, notes)


def scaled(sel: Selection, speedup: float) -> list[float]:
    """Each request's due time in seconds from the replay's start: trace time / speedup."""
    if not speedup > 0:
        raise UsageError(f"speedup {speedup} must be positive")
    return [r.at_s / speedup for r in sel.requests]
