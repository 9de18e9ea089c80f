"""Calibrated built-in workloads: the sweep's trial block (parity.stats.calibrate), for the
one field of each kind that sets how long its windows last (its kind's `knob`).  A built-in
is sized from the profile, not from the machine, so on a fast box its decode streams can end
before a window reaches serving.min_window_s (prefill-under-decode's decode windows of 310 ms,
multi-turn's turns of 340 ms on the smoke profile, against 500 ms).

Block 0 runs as sized; per point, the stream that ends last among those the field sets (its
kind's `paced()`: prefill-under-decode's decode streams, the others' every request) gives its
pace and where each window starts relative to its first token.  The field is raised, never
lowered, so every window would last min_window_s even at serving.calibrate.margin times that
pace, within the context each engine gives a request (less what else the kind's request
carries: its `cap()`); block 0 is then the trial and the measured blocks follow.  A field
written in YAML or --workload-opt (or a declared workload's) is kept exactly, as the sweep
keeps an explicit --gen."""

from __future__ import annotations

from parity.decode import replace
from parity.metrics import serving as metrics
from parity.results.model import PointRow
from parity.stats.calibrate import burst, calibration_off, choose, stream_need
from parity.workloads import WORKLOADS


def knob_value(wl) -> int:
    """The knob's value: gen as resolved (the section's, else serving.gen), else the section's field."""
    knob = WORKLOADS[wl.kind].knob
    return wl.gen if knob == "gen" else getattr(wl.cfg, knob)


def why_off(s, wl, gen_given: bool) -> str | None:
    """Why the trial may not raise this workload's field (None: it may): as the sweep's gen
    (parity.stats.calibrate.calibration_off), and only a field parity sized."""

    knob = WORKLOADS[wl.kind].knob
    if knob not in wl.sized:
        return f"{knob} set in YAML or --workload-opt" if wl.builtin else "a declared workload keeps its shapes"
    return calibration_off(s, knob == "gen" and gen_given)


def plan_text(plan) -> str:
    wl, s = plan.workload, plan.shape
    knob, v = WORKLOADS[wl.kind].knob, knob_value(wl)
    if plan.calibrate is None:
        return f"off ({plan.calibration_off}): {knob} {v} as given"
    c = plan.calibrate
    return (f"block 0 runs at {knob} {v}; if a point's window would fall under min_window_s {s.min_window_s:g} s at {c.margin:g} x its pace, "
            f"{knob} is raised for every engine (at most {c.max_gen} and what each engine's context allows) and block 0 becomes the trial")  # fmt: skip


def basis(kind: str, records, decode, windows) -> dict | None:
    """One point's evidence (pure): the stream that ends last among those the field sets, its
    pace (seconds per token after its first) and each window's lead (the stream's first token
    less the window's start, as parity.metrics.serving computes them over the valid requests)."""
    ok = [r for r in records if r.valid and r.first is not None and r.end is not None]
    counted = {id(r) for r in ok}
    k = WORKLOADS[kind]
    streams = [r for r in k.paced(records, decode) if id(r) in counted and r.tokens >= 2]
    if not streams:
        return None

    last = max(streams, key=lambda r: r.end)
    end = max(r.end for r in ok)  # every window ends at the last token: it starts its own length before that
    starts = {w: end - getattr(metrics, w)(ok) for w in windows}
    reads = len({t for t in last.token_times if t > last.first})
    # tokens that came in a few reads (a client starved of CPU, a buffering server) time the
    # reads, not decode steps: then its whole request, send to last token, is the pace (as the
    # sweep lets the wall window decide)
    lumped = burst(last.tokens, reads)
    pace = (last.end - last.send) / last.tokens if lumped else (last.end - last.first) / (last.tokens - 1)
    return {"knob": k.knob, "tokens": last.tokens, "pace_s": round(pace, 9), "reads": reads, "burst": lumped,
            "lead_s": {w: round(last.first - starts[w], 6) for w in windows}}  # fmt: skip


def need_of(min_window_s: float, margin: float):
    def needs(row: PointRow) -> dict:
        b = row.info.get("calibration_basis") or {}
        return {w: stream_need(lead, b.get("pace_s"), min_window_s, margin) for w, lead in (b.get("lead_s") or {}).items()}

    return needs


def caps(plan, wl) -> dict[str, tuple[int, str]]:
    """engine -> (the largest value of the field its request context allows, what sets that)."""
    out = {}
    for e in plan.engines:
        limit = plan.limits.get(e)
        if not limit:
            continue
        value, less = WORKLOADS[wl.kind].cap(limit, wl)
        out[e] = (value, f"engine {e}'s {limit}-token request context ({plan.limit_what.get(e)}) {less}")
    return out


def choose_for(plan, rows: list[PointRow]):
    """The trial block's Calibration of the workload's field (parity.stats.calibrate.choose
    with the stream rule); parity.serving.snapshot.calibrate_after_trial applies it."""

    s, c, wl = plan.shape, plan.calibrate, plan.workload
    return choose(rows, knob_value(wl), s.min_window_s, c.margin, caps(plan, wl), c.max_gen, need_of=need_of(s.min_window_s, c.margin), knob=WORKLOADS[wl.kind].knob)


def with_value(wl, v: int):
    knob = WORKLOADS[wl.kind].knob
    return replace(wl, cfg=replace(wl.cfg, **{knob: v}), gen=v if knob == "gen" else wl.gen)
