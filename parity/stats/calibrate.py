"""Calibrated windows: how many tokens each request must generate so that every point's
measurement windows last long enough to time (serving.min_window_s), as pyperf
calibrates its loops before it measures.

The evidence is a trial block run at the profile's gen: every engine x N once.  Per
point the pace of its windows (decode: (gen - 1) token gaps between the first and the
last token; wall: gen tokens from the first send to the last token) gives the gen at
which the window would reach min_window_s x margin.  A decode window whose tokens came in
fewer reads than half its token gaps (decode_window_reads) was delivered in bursts, by a
client starved of CPU or a server that buffers its stream: its length is when the client
read, not how fast the engine decoded, so it is not a pace and the wall window decides.
One gen for every engine and N (the arms stay comparable): the largest need, never below
the profile's gen, capped by the context every engine gives a request and by
serving.calibrate.max_gen.  Pure: the caller runs the block and applies the choice
(parity.serving.snapshot)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from parity.results.model import PointRow, point_rows

WINDOWS = ("decode_window_s", "wall_s")


def burst(gen: int, reads: int | None) -> bool:
    """The decode window's tokens came in fewer reads than half its gen - 1 token gaps (None: not counted)."""
    return reads is not None and gen > 1 and reads < max(2, math.ceil((gen - 1) / 2))


def point_label(point: str | None, n) -> str:
    """A workload's point label, else the sweep's N=n."""
    return point if point else f"N={n}"


def needed_gen(gen: int, window_s: float | None, target_s: float, window: str = "decode_window_s") -> int | None:
    """The gen at which a window measured at `gen` tokens would last target_s (None: no
    usable window).  decode_window_s spans gen - 1 token gaps, wall_s about gen tokens."""
    gaps = gen - 1 if window == "decode_window_s" else gen
    if window_s is None or not window_s > 0 or gaps < 1 or not math.isfinite(window_s):
        return None
    pace = window_s / gaps  # seconds per token of one sequence at this point's concurrency
    return math.ceil(target_s / pace - 1e-9) + (gen - gaps)


@dataclass
class Calibration:
    gen: int  # the chosen gen
    trial_gen: int  # the gen the trial block ran at (the floor)
    target_s: float  # min_window_s x margin
    min_window_s: float
    margin: float
    cap: int | None  # the most gen any engine's context (and max_gen) allows
    cap_by: str = ""
    need: int | None = None  # the largest need over the points (before the cap)
    shortest: str = ""  # the point that set the need
    capped: bool = False  # the cap kept gen under the need
    kept_trial: bool = True  # the trial block reached the target: it is the first measured block
    points: list = field(default_factory=list)  # per point: engine, n, repeat, windows, need
    bursts: list = field(default_factory=list)  # points whose decode window was a burst, not a pace
    knob: str = "gen"  # the field calibrated (a built-in workload's decode streams: decode_gen)

    def to_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        if self.kept_trial and not self.capped:
            return f"calibration: {self.knob} {self.gen} gives every point windows >= {self.target_s:g} s (min_window_s {self.min_window_s:g} x {self.margin:g}; shortest {self.shortest}); block 0 counts"
        if self.kept_trial:
            return f"calibration: {self.knob} {self.gen} kept (the cap is {self.cap}, {self.cap_by}); block 0 counts"
        return f"calibration: {self.knob} {self.trial_gen} -> {self.gen} so every window reaches {self.target_s:g} s (min_window_s {self.min_window_s:g} x {self.margin:g}; shortest {self.shortest}); block 0 was the trial, measured blocks follow"

    def burst_note(self) -> str | None:
        if not self.bursts:
            return None
        return f"calibration: the decode window of {', '.join(self.bursts)} came in fewer reads than half its {self.trial_gen - 1} token gaps (a client starved of CPU, or a server buffering its stream): not a pace, so its wall window decided"

    def warning(self) -> str | None:
        if not self.capped:
            return None
        return f"calibration: {self.shortest} needs {self.knob} {self.need} for a {self.target_s:g} s window, capped at {self.gen} by {self.cap_by}: its windows may stay under the target (raise --ctx or lower --parallel, or raise min_window_s's tolerance)"


def stream_need(lead_s: float | None, pace_s: float | None, min_window_s: float, margin: float) -> int | None:
    """Tokens a stream must generate so that a window it ends lasts min_window_s even at
    `margin` times its trial pace (None: no pace).  The window starts lead_s before the
    stream's first token (negative: after it, as when long prompts arrive on a schedule
    while the stream decodes); the stream's tokens then come pace_s apart.  With lead 0
    this is needed_gen's rule: (tokens - 1) x pace >= min_window_s x margin."""
    if lead_s is None or pace_s is None or not pace_s > 0 or not math.isfinite(lead_s):
        return None
    span = max(min_window_s * margin - lead_s, margin * (min_window_s - lead_s))
    return 1 + max(1, math.ceil(span / pace_s - 1e-9))


def choose(rows: list, gen: int, min_window_s: float, margin: float, caps: dict[str, tuple[int, str]] | None = None, max_gen: int | None = None,
           need_of=None, knob: str = "gen") -> Calibration:  # fmt: skip
    """rows: the trial block's PointRows (engine, n, repeat, decode_window_s, wall_s) at `gen`.
    caps: engine -> (the most tokens it lets a request generate, what sets that).
    need_of(row) -> {window: tokens or None}: a workload's own rule (default: the sweep's,
    from the row's windows, with bursts set aside); knob: the name of what is calibrated."""
    target = min_window_s * margin
    cal = Calibration(gen=gen, trial_gen=gen, target_s=round(target, 6), min_window_s=min_window_s, margin=margin, cap=None, knob=knob)
    limits = [(c, why) for c, why in (caps or {}).values()]
    if max_gen:
        limits.append((max_gen, f"serving.calibrate.max_gen {max_gen}"))
    if limits:
        cal.cap, cal.cap_by = min(limits, key=lambda x: x[0])
    worst = None
    for r in point_rows(rows):
        reads = r.metric("decode_window_reads")
        where = f"{r.engine} {r.label}"
        if need_of is not None:
            needs = need_of(r)
        else:
            needs = {w: needed_gen(gen, r.metric(w), target, w) for w in WINDOWS}
            if burst(gen, reads):
                needs["decode_window_s"] = None
                cal.bursts.append(f"{where} ({reads} read{'s' if reads != 1 else ''})")
        usable = [v for v in needs.values() if v is not None]
        need = max(usable) if usable else None
        cal.points.append({"engine": r.engine, "n": r.n, **({"point": r.point} if r.point else {}), "repeat": r.repeat,
                           **{w: r.metric(w) for w in WINDOWS}, "decode_window_reads": reads, "need": need})  # fmt: skip
        if need is not None and (worst is None or need > worst[0]):
            worst = (need, where)
    if worst is None:
        cal.shortest = "no point had a window to time"
        return cal
    cal.need, cal.shortest = worst
    want = max(gen, cal.need)
    if cal.cap is not None and want > cal.cap:
        cal.capped = cal.need > gen
        want = max(gen, cal.cap)  # never below the profile's gen: it ran (and fit) in the trial
    cal.gen = want
    cal.kept_trial = want == gen
    return cal


def _pace(row: PointRow, gen: int, window: str) -> float | None:
    """Seconds per token of one stream at this point: a workload row's stream pace
    (calibration_basis), else the window over its token gaps at `gen`."""
    b = row.info.get("calibration_basis")
    if isinstance(b, dict):
        return b.get("pace_s")
    if window == "decode_window_s" and burst(gen, row.metric("decode_window_reads")):
        return None  # read in a burst: its length is when the client read, not a pace
    v, gaps = row.metric(window), gen - 1 if window == "decode_window_s" else gen
    return v / gaps if v and gaps > 0 else None


def outran(cal: dict, trial_rows: list, rows: list, min_window_s: float, windows=WINDOWS) -> list[dict]:
    """Measured points whose window still fell under min_window_s: how many times faster
    than in the trial their tokens came.  The choice covers `margin` times the trial pace,
    so `faster` above the margin means the box sped up past it (other load went away,
    clocks rose); at or below it, the trial did not predict this window.  windows: those
    the validity rule times (parity.metrics.validity.point_verdict's).  Rows: PointRows."""
    def key(r: PointRow):
        return r.engine, r.point or r.n

    trial = {key(r): r for r in point_rows(trial_rows)}
    out = []
    for r in point_rows(rows):
        for w in windows:
            v = r.metric(w)
            if v is None or v >= min_window_s:
                continue
            t = trial.get(key(r))
            was, now = (_pace(t, cal["trial_gen"], w) if t else None), _pace(r, cal["gen"], w)
            out.append({"engine": r.engine, "n": r.n, **({"point": r.point} if r.point else {}), "repeat": r.repeat, "window": w,
                        "window_s": v, "trial_pace_ms": None if was is None else round(was * 1000, 4), "pace_ms": None if now is None else round(now * 1000, 4),
                        "faster": round(was / now, 3) if was and now else None})  # fmt: skip
    return out


def outran_line(items: list[dict], margin: float, min_window_s: float) -> str | None:
    """One line for the console and the report: which calibrated windows fell short, and why."""
    if not items:
        return None

    def one(o: dict) -> str:
        where = f"{o['engine']} r{o['repeat']} {point_label(o.get('point'), o['n'])} {o['window']}"
        if o["faster"] is None:
            return f"{where} (no pace to compare: the trial's window came in a burst, or has none)"
        return f"{where}: {o['faster']:g}x the trial's pace ({o['trial_pace_ms']:g} -> {o['pace_ms']:g} ms a token)"

    within = [o for o in items if o["faster"] is not None and o["faster"] <= margin]
    why = ("the box ran faster than in the trial by more than serving.calibrate.margin: something that competed for it during the trial stopped, or its clocks changed; "
           "run where nothing else competes, or raise the margin") if not within else \
          "some ran within the margin of the trial's pace: the trial did not predict their windows (a calibration defect worth reporting)"  # fmt: skip
    return f"calibration: {len(items)} calibrated window(s) fell under min_window_s {min_window_s:g} s: {'; '.join(one(o) for o in items)}. {why}"


def calibration_off(s, gen_given: bool) -> str | None:
    """Why the trial block may not raise gen (None: it may)."""
    if not s.calibrate.enabled:
        return "serving.calibrate.enabled false"
    if s.min_window_s <= 0:
        return "min_window_s 0"
    if s.order == "aabb":
        return "--order aabb has no trial block"
    return "--gen given" if gen_given else None
