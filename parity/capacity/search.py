"""The capacity search: per engine a cheap bracket, then paired blocks at a few loads around it.

1. Bracket (per engine, small probes): double the load from `start` until an objective fails
   (a failure on the way up is probed again on other prompts first; halve from `start` when it
   already fails there), then `refine` regula-falsi probes between the last load that held and
   the first that failed; the estimate is where the line through those two crosses 0.
2. Levels: per engine, `levels` loads evenly spaced in log(load) over its estimate -+
   `spread_pct` %, the same factors for every engine, so that each engine's j-th level sits at
   the same place on its own curve as the reference's.
3. Blocks: every engine at every level on the block's prompts; per level the engines run back
   to back (sharing the box's drift of that moment), rotated per block (abba) and reversed per
   level; or (arms "engine", the real engines) each engine's levels back to back on one server
   start, the engines rotated per block.  Per engine and objective, the margin
   log(limit / percentile) against log(load) is a line with one slope over every block and an
   intercept per block; the objective whose line through all the engine's points crosses 0
   lowest binds, and a block's capacity is where that objective's line crosses 0 in the block
   (parity.capacity.estimate).  The levels move to the running estimates after each of the
   first `recentre` blocks, and later when an engine's estimate leaves the middle of its levels
   (the others at the reference's times the running ratio, so that they stay matched), by one
   span at most; an engine that met (missed) every level jumps (jump).
4. The capacity ratio engine / reference is parity.stats.paired over the per-block capacities
   (geometric mean of the per-block ratios, 95 % t interval on their logs, the three-way
   outcome); blocks are added until parity.stats.adaptive's stop rule (--until-ci on the
   ratio's conservative half-width, --max-repeats, a time budget) or the request budget ends it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from parity.capacity.estimate import Probed, engine_summary, estimates
from parity.capacity.frontier import frontier
from parity.capacity.probe import CLOSED, Probe, PromptSet
from parity.capacity.shape import falling_output
from parity.stats import adaptive
from parity.stats.blocks import block_order
from parity.stats.paired import paired

REQUEST_BUDGET = "request-budget"
METHOD = ("per engine and objective, the margin log(limit / percentile) against log(load): lines with one slope "
          "and an intercept per block; the binding objective's crossing of 0 in each block is that block's "
          "capacity; the ratio is parity.stats.paired over the per-block capacities")  # fmt: skip


@dataclass
class Plan:
    engines: list  # every engine, the reference among them
    reference: str
    objectives: list  # [parity.capacity.slo.Objective]
    kind: str = CLOSED  # CLOSED: load = clients; OPEN: load = requests per second
    start: float = 1.0
    min_load: float = 1.0
    max_load: float = 4096.0
    levels: int = 4
    spread_pct: float = 15.0
    requests: int = 300  # measured requests per probe of a block
    bracket_requests: int = 100  # per bracket probe
    refine: int = 2
    recentre: int = 2  # blocks after which the levels always move to the running estimates
    warmup: int | None = None  # open loop: warm-up requests per probe (None: a quarter of the measured, >= 8)
    order: str = "abba"
    # "level": per level the engines back to back (the simulator's); "engine": each engine's levels
    # back to back, so that a real engine's server starts once per block (docs/CAPACITY.md)
    arms: str = "level"
    threshold_pct: float = 2.0
    confidence: float = 0.95
    # at least 6 blocks: every block's capacity leans on one slope per engine, whose error the
    # spread of 3 blocks does not show (docs/CAPACITY.md)
    budget: adaptive.Budget = field(default_factory=lambda: adaptive.Budget(None, min_blocks=6, max_blocks=20))
    max_requests: int | None = None  # every request sent, bracket included
    gpus: int = 1

    def as_dict(self) -> dict:
        keep = ("engines", "reference", "kind", "start", "min_load", "max_load", "levels", "spread_pct", "requests",
                "bracket_requests", "refine", "recentre", "warmup", "order", "arms", "threshold_pct", "confidence",
                "max_requests", "gpus")
        out = {k: getattr(self, k) for k in keep}
        out.update(objectives=[o.name for o in self.objectives], budget=self.budget.describe(),
                   limits_ms={o.name: o.limit_ms for o in self.objectives})
        return out


class Search:
    """One capacity search: a Probe, the prompts of each block (prompts(block, measured, warmup)),
    the plan; run() -> a plain dict (docs/CAPACITY.md#the-result)."""

    def __init__(self, probe: Probe, prompts: Callable[[int, int, int], PromptSet], plan: Plan,
                 log: Callable | None = None):
        self.probe, self.prompts, self.plan = probe, prompts, plan
        self.log = log or (lambda line: None)
        self.probes: list[Probed] = []
        self.problems: list[str] = []  # what the result lacks (no bracket, no ratio, a probe's invalid requests)
        self.notes: list[str] = []  # what the search did about a block that gave no capacity
        self.jumped: set = set()  # engines whose levels jump() set: wide, centred on no estimate

    @property
    def sent(self) -> int:
        return sum(p.sent for p in self.probes)

    def snap(self, load: float) -> float:
        p = self.plan
        load = min(max(load, p.min_load), p.max_load)
        return float(max(1, round(load))) if p.kind == CLOSED else float(f"{load:.4g}")

    def warmup(self, loads, measured: int) -> int:
        p = self.plan
        if p.kind == CLOSED:
            return int(max(loads))  # one a client
        return p.warmup if p.warmup is not None else max(8, measured // 4)

    def measure(self, engine: str, load: float, block: int, prompts: PromptSet) -> Probed:
        r = self.probe(engine, load, block, prompts)
        objs = self.plan.objectives
        got = Probed(engine, load, block, {o.name: o.margin(r) for o in objs}, {o.name: o.attainment(r) for o in objs},
                     r.throughput_tps / self.plan.gpus, r.user_tps, r.sent, r.seconds, list(r.problems))  # fmt: skip
        got.problems += [f"{name}: no sample" for name, m in got.margins.items() if m is None]
        self.probes.append(got)
        return got

    # ------------------------------------------------------------------ bracket
    def bracket(self, engine: str) -> dict:
        """Double (or halve) the load until an objective fails (holds); a failure on the way up is
        probed again on other prompts before it counts (one probe's p99 of a hundred requests is
        nearly its maximum: one stray request would end the doubling far below the capacity)."""
        p = self.plan
        cache: dict = {}

        def at(load: float, block: int = -1) -> float | None:
            w = self.warmup([load], p.bracket_requests)
            if (block, w) not in cache:
                cache[block, w] = self.prompts(block, p.bracket_requests, w)
            got = self.measure(engine, load, block, cache[block, w])
            self.log(f"bracket {engine} at {load:g}: margin {fmt(got.margin)}{binding(got, p.objectives)}")
            return got.margin

        passed = failed = None  # (load, margin)
        load = self.snap(p.start)
        while True:
            m = at(load)
            if (m is None or m < 0) and passed is not None and failed is None:
                m = at(load, -2)  # confirm a failure on the way up
            if m is not None and m >= 0:
                passed = (load, m)
                if failed is not None or load >= p.max_load:
                    break
                load = self.snap(load * 2)
            else:
                failed = (load, m)
                if passed is not None or load <= p.min_load:
                    break
                load = self.snap(load / 2)
        out = {"engine": engine, "passed": passed, "failed": failed, "estimate": None, "why": ""}
        if failed is None:
            out["why"] = f"{engine} meets every objective at the largest load, {p.max_load:g}: its capacity is past it"
            return out
        if passed is None:
            out["why"] = f"{engine} misses an objective at the smallest load, {p.min_load:g}: its capacity is below it"
            return out
        for _ in range(p.refine):
            if failed[1] is None:
                break
            guess = self.snap(interpolate(passed, failed))
            if not min(passed[0], failed[0]) < guess < max(passed[0], failed[0]):
                break
            m = at(guess)
            if m is not None and m >= 0:
                passed = (guess, m)
            else:
                failed = (guess, m)
        out.update(passed=passed, failed=failed)
        out["estimate"] = interpolate(passed, failed) if failed[1] is not None else math.sqrt(passed[0] * failed[0])
        return out

    # ------------------------------------------------------------------ levels
    def levels_for(self, estimates_: dict) -> dict:
        """Per engine, `levels` loads evenly spaced in log(load) over its estimate -+spread_pct %:
        the same factors for every engine, so that its j-th level sits where the reference's
        j-th does on its own curve."""
        p = self.plan
        n, s = max(2, p.levels), p.spread_pct / 100
        lo, hi = math.log(1 - s), math.log(1 + s)
        factors = [math.exp(lo + (hi - lo) * j / (n - 1)) for j in range(n)]
        return {e: self.apart([est * f for f in factors]) for e, est in estimates_.items()}

    def first_levels(self, estimates_: dict) -> dict:
        """Block 0's levels, from the brackets' estimates, matched as after every block: an engine
        whose estimate moves the lowest level under half a client from the reference's gets the
        reference's levels (closed loop).  On a curved margin line other levels read another
        capacity: an A/A's brackets (11.12 and 10.98 clients) put stock_b at 9, 10, 12, 13 and
        stock at 9, 10, 11, 13, which on stock's own line alone read 0.9 % apart (the H200,
        2026-11-30, docs/evidence/device-h200-1130b/)."""
        p = self.plan
        if p.kind != CLOSED:
            return self.levels_for(estimates_)
        ref = estimates_[p.reference]
        return self.levels_for(self.wanted(ref, {e: est / ref for e, est in estimates_.items() if e != p.reference}))

    def wanted(self, ref: float, ratios: dict) -> dict:
        """Per engine, the capacity its levels are centred on: the reference's `ref`, the others' ref
        times their ratio ({engine: ratio}), matched in whole clients (closed loop: see matched)."""
        p = self.plan
        lowest = ref * (1 - p.spread_pct / 100)
        return {p.reference: ref, **{e: ref * (matched(r, lowest) if p.kind == CLOSED else r) for e, r in ratios.items()}}

    def levels_between(self, lo: float, hi: float) -> list:
        """`levels` loads evenly spaced in log(load) from lo to hi (whole clients kept apart)."""
        p = self.plan
        n = max(2, p.levels)
        return self.apart([lo * (hi / lo) ** (j / (n - 1)) for j in range(n)])

    def apart(self, wanted: list) -> list:
        """The wanted loads, snapped; closed loop: whole clients, neighbours where the spread rounds
        onto one, none past max_load (the largest load probed) while there is room below it, and
        the whole set moved by whole clients to where its middle is nearest the wanted one's (the
        neighbours pushed up alone would sit above it: 2.7..3.6 clients would be probed at 3..6,
        all past a capacity of 2.1, where 2..5 hold it; the H200 knob, 2026-11-30)."""
        p = self.plan
        loads = [self.snap(x) for x in wanted]
        if p.kind != CLOSED:
            return loads
        for j in range(1, len(loads)):
            loads[j] = max(loads[j], loads[j - 1] + 1)
        for j in range(len(loads) - 1, -1, -1):
            room = math.floor(p.max_load) if j == len(loads) - 1 else loads[j + 1] - 1
            loads[j] = max(self.snap(p.min_load), min(loads[j], float(room)))
        if any(b <= a for a, b in zip(loads, loads[1:])):
            return loads  # no room for them apart: nothing to move
        centre = math.log(wanted[0] * wanted[-1]) / 2
        lowest, highest = self.snap(p.min_load) - loads[0], math.floor(p.max_load) - loads[-1]
        shifts = range(int(max(lowest, -len(loads))), int(min(highest, len(loads))) + 1)
        best = min(shifts, key=lambda k: (abs(math.log((loads[0] + k) * (loads[-1] + k)) / 2 - centre), abs(k)))
        return [x + best for x in loads]

    def recentre(self, blocks: list[dict], per_block: dict, ratios: list[dict], levels: dict,
                 pooled: dict | None = None) -> dict | None:
        """New levels: an engine that met (missed) the objectives at every level of the last block
        moves up (down) towards where its capacity lies (past_levels, jump), by one span at least
        (the bracket's short probes misjudged it); else after each of the first `recentre` blocks, and
        later whenever an engine's running capacity has left the middle of its levels (between
        the geometric midpoints of its two lowest and its two highest): the reference on the
        median of its blocks' crossings, every other engine on that times its running ratio, so
        that the engines' levels stay matched; by one span at most (always the block after a jump: its
        wide levels, unmatched, would hold an estimate in their middle)."""
        p = self.plan
        span = (1 + p.spread_pct / 100) / (1 - p.spread_pct / 100)
        last = blocks[-1]
        new = dict(levels)
        jumped, self.jumped = self.jumped, set()
        for e in p.engines:
            ms = [g.margin for g in last["probes"][e]]
            if per_block[e][last["block"]]["capacity"] is None and None not in ms and (min(ms) >= 0 or max(ms) < 0):
                up = min(ms) >= 0
                mid = math.sqrt(levels[e][0] * levels[e][-1])
                # a miss (or a room) under one span's worth of margin at the nearest level is one span away at most:
                # only a decisive one jumps (an A/A's noisy block on a shared CPU must not throw its levels)
                guesses = []
                if abs(nearest(last["probes"][e], up).margin) > math.log(span):
                    guesses = [per_block[e][last["block"]]["guess"], self.past_levels(last["probes"][e], up, pooled)]
                new[e] = self.levels_between(*jump(mid, guesses, up, span, p.spread_pct / 100))
                self.jumped.add(e)
                word, way = ("met", "up") if up else ("missed", "down")
                self.notes.append(f"block {last['block']}: {e} {word} the objectives at every level: "
                                  f"its levels move {way}, to {fmt(new[e][0])}..{fmt(new[e][-1])}")
        if new != levels:
            self.jumped |= jumped
            return new
        ref = median([v["guess"] for v in per_block[p.reference].values() if isinstance(v["guess"], float)])
        if ref is None or any(r["ratio"] is None for r in ratios):
            self.jumped |= jumped
            return None
        want = self.wanted(ref, {r["engine"]: r["ratio"] for r in ratios})
        middle = all(math.sqrt(v[0] * v[1]) <= want[e] <= math.sqrt(v[-2] * v[-1]) for e, v in levels.items())
        if len(blocks) > p.recentre and middle and not jumped:  # a jump's wide levels always go back to matched ones
            return None
        for e, v in levels.items():  # one span at a time: a block's stray estimate moves the levels, never throws them
            mid = math.sqrt(v[0] * v[-1])
            want[e] = min(max(want[e], mid / span), mid * span)
        new = self.levels_for(want)
        return new if new != levels else None

    def past_levels(self, probes: list, up: bool, pooled: dict | None):
        """Where an engine that met (up) or missed every level crosses 0: from the level nearest
        its capacity, along the reference's slope of each objective, where the first of them
        crosses (not the lowest margin's: a small miss on a gentle slope crosses farther down);
        one block all on one side of 0 gives its own line too steep or too flat as often as not.
        An objective met there whose reference line does not fall never crosses; None: one missed
        there without a falling line."""
        near = nearest(probes, up)
        ms = {k: m for k, m in near.margins.items() if m is not None and math.isfinite(m)}
        if not ms or pooled is None:
            return None
        slopes = pooled.get(self.plan.reference, {}).get("slopes", {})
        falls = {k: m for k, m in ms.items() if slopes.get(k) is not None and slopes[k] < 0}
        if any(m < 0 for k, m in ms.items() if k not in falls) or not falls:
            return None  # a missed objective whose line does not fall: no guess (one held there never binds)
        return min(near.load * math.exp(-m / slopes[k]) for k, m in falls.items())

    # ------------------------------------------------------------------ blocks
    def block(self, b: int, levels: dict) -> dict:
        """Every engine at every level on block b's prompts, the engines rotated per block (abba).
        arms "level": per level the engines back to back, reversed per level; "engine": each
        engine's levels back to back (rising(b, engines)), then the next engine's."""
        p = self.plan
        ps = self.prompts(b, p.requests, self.warmup([x for v in levels.values() for x in v], p.requests))
        order = block_order(list(p.engines), b, p.order)
        n = len(levels[p.engines[0]])
        if p.arms == "engine":
            way = range(n) if rising(b, len(p.engines)) else range(n - 1, -1, -1)
            steps = [(j, e) for e in order for j in way]
        else:
            steps = [(j, e) for j in range(n) for e in (order if j % 2 == 0 else order[::-1])]
        probes: dict = {e: [None] * n for e in p.engines}
        ran = []
        for j, e in steps:
            probes[e][j] = self.measure(e, levels[e][j], b, ps)
            ran.append(f"{e}@{levels[e][j]:g}")
        sent = sum(g.sent for gs in probes.values() for g in gs)
        return {"block": b, "order": ran, "levels": levels, "probes": probes, "sent": sent}

    def ratios(self, per_block: dict) -> list[dict]:
        p = self.plan
        caps = {e: {k: v["capacity"] for k, v in per_block[e].items() if v["capacity"] is not None} for e in p.engines}
        out = []
        for e in p.engines:
            if e != p.reference:
                pr = paired(caps[p.reference], caps[e], "higher", p.threshold_pct, p.confidence)
                out.append({"engine": e, "reference": p.reference, **pr.to_dict()})
        return out

    def run(self) -> dict:
        p = self.plan
        brackets = {e: self.bracket(e) for e in p.engines}
        self.problems += [b["why"] for b in brackets.values() if b["estimate"] is None]
        result = {"plan": p.as_dict(), "method": METHOD, "brackets": brackets, "levels": []}
        if self.problems:
            return self.finish(result, ("bracket", "; ".join(self.problems)), [])
        levels = self.first_levels({e: brackets[e]["estimate"] for e in p.engines})
        result["levels"].append({"from_block": 0, "levels": levels})
        if (secs := block_seconds(self.probes, levels, lambda load: sent_per_probe(p, load))) is not None:
            self.log(f"blocks: about {secs:.0f} s of probes each, from the bracket's probe times "
                     f"({len(p.engines)} engines x {len(next(iter(levels.values())))} levels x {p.requests} requests)")
        blocks: list[dict] = []
        elapsed, decision = 0.0, None
        while decision is None:
            nxt = math.ceil(1.15 * max((b["sent"] for b in blocks), default=0))  # a block's cool-downs vary
            if p.max_requests is not None and blocks and self.sent + nxt > p.max_requests:
                why = f"{self.sent} requests sent; another block (~{nxt}) could pass the {p.max_requests} budget"
                decision = (REQUEST_BUDGET, why)
                break
            blk = self.block(len(blocks), levels)
            dt = sum(g.seconds for gs in blk["probes"].values() for g in gs)
            elapsed += dt
            blocks.append(blk)
            per_block, pooled = estimates(blocks, p.engines, p.objectives)
            ratios = self.ratios(per_block)
            widths = {f"{r['engine']} capacity": r["stop_half_width_pct"] for r in ratios}
            decision = adaptive.stop(p.budget, len(blocks), widths, elapsed, dt)
            caps = ", ".join(f"{e} {fmt(per_block[e][blk['block']]['capacity'])}" for e in p.engines)
            rs = ", ".join(f"{r['engine']}/{r['reference']} {fmt(r['ratio'])} +-{fmt(r['half_width_pct'])}%"
                           for r in ratios)  # fmt: skip
            self.log(f"block {blk['block']}: {caps}; {rs}")
            if decision is None and p.max_requests is not None and self.sent >= p.max_requests:
                decision = (REQUEST_BUDGET, f"{self.sent} requests sent: the {p.max_requests} budget is spent")
            if decision is None and (moved := self.recentre(blocks, per_block, ratios, levels, pooled)):
                levels = moved
                result["levels"].append({"from_block": len(blocks), "levels": levels})
        return self.finish(result, decision, blocks)

    def finish(self, result: dict, decision: tuple, blocks: list[dict]) -> dict:
        p = self.plan
        per_block, pooled = estimates(blocks, p.engines, p.objectives)
        engines = {e: engine_summary(blocks, e, per_block[e], pooled[e], p.objectives, p.confidence) for e in p.engines}
        for e in p.engines:
            engines[e]["bracket"] = result["brackets"][e]
        self.notes += [f"{e} {x}" for e in p.engines for x in engines[e]["blocks_without_capacity"]]
        self.notes += [n for e in p.engines if (n := falling_output(self.probes, e))]
        ratios = self.ratios(per_block) if blocks else []
        self.problems += [f"{g.engine} at {g.load:g} (block {g.block}): {x}" for g in self.probes for x in g.problems]
        self.problems += [f"{r['engine']}/{r['reference']}: no capacity ratio with an interval ({r['reason']})"
                          for r in ratios if r["ratio"] is None or r["low"] is None]  # fmt: skip
        result.update(
            engines=engines,
            ratios=ratios,
            frontier={e: frontier(self.probes, e, p.confidence) for e in p.engines},
            stop={"rule": decision[0], "why": decision[1], "blocks": len(blocks), "budget": p.budget.describe()},
            requests=self.sent,
            seconds=round(sum(x.seconds for x in self.probes), 3),
            problems=list(dict.fromkeys(self.problems)),
            notes=list(dict.fromkeys(self.notes)),
            blocks=[block_dict(b, per_block) for b in blocks],
            bracket_probes=[x.to_dict() for x in self.probes if x.block < 0],
        )
        return result


def block_dict(b: dict, per_block: dict) -> dict:
    engines = {e: {**per_block[e][b["block"]], "probes": [g.to_dict() for g in gs]} for e, gs in b["probes"].items()}
    return {"block": b["block"], "order": b["order"], "levels": b["levels"], "sent": b["sent"], "engines": engines}


def rising(block: int, engines: int) -> bool:
    """Whether block `block` runs each engine's levels up (else down), arms "engine": the same way
    for `engines` blocks in a row, so that over them the rotation (A B | B A) puts every engine
    first and second in blocks of each way.  Flipped every block, one engine was always first in the
    up-blocks, and a server started first going up read lower: in the two H200 A/As (2026-11-29, -30)
    that engine's up-block ratios were 0.98 and 0.96 (down-blocks 1.00, 0.99), and in six CPU A/As
    it read 3 % lower in the up-blocks (geometric mean; 4 of 6 lower) and the A/A ratio leaned its way."""
    return (block // max(1, engines)) % 2 == 0


def median(values: list) -> float | None:
    """The median, the geometric mean of the middle two for an even count; None of nothing."""
    v = sorted(values)
    if not v:
        return None
    return v[len(v) // 2] if len(v) % 2 else math.sqrt(v[len(v) // 2 - 1] * v[len(v) // 2])


MAX_JUMP = 3  # spans: levels that missed (met) everywhere move to the block's crossing, at most this far


def nearest(probes: list, up: bool):
    """The probe of an engine's block nearest its capacity when it met (up: the highest load) or
    missed (the lowest) every level."""
    return max(probes, key=lambda g: g.load) if up else min(probes, key=lambda g: g.load)


def matched(ratio: float, lowest: float) -> float:
    """The ratio an engine's whole-client levels follow the reference's by: 1 (the reference's
    own levels) while it moves the lowest of them by under half a client, so that rounding, not
    the ratio, would decide which of the levels differ: an A/A's running ratio of 1.02 put
    stock_b at 11, 13, 14, 16 clients and stock at 11, 12, 14, 15 (the H200, 2026-11-30), and
    on a curved margin line other loads read another capacity."""
    return 1.0 if abs(ratio - 1) * lowest < 0.5 else ratio


def jump(mid: float, guesses: list, up: bool, span: float, spread: float) -> tuple[float, float]:
    """The load range an engine's next levels cover when it met (up) or missed (not up) the
    objectives at every level around `mid`: the usual levels one span past `mid` (-+spread),
    widened to the farthest of the `guesses` of its crossing on that side (None, "inf" or the
    wrong side: ignored), at most MAX_JUMP spans.  Two guesses, because one block all on one
    side of 0 extrapolates badly: its own line read 16.8 for a capacity of 18 where the
    reference's slope read 46 (closed loop), and 3.5 for 12.4 where the reference's slope read
    11.5 (open loop, the simulator);
    levels over the whole range hold the crossing either way."""
    near = mid * span if up else mid / span
    far = mid * span**MAX_JUMP if up else mid / span**MAX_JUMP
    lo, hi = near * (1 - spread), near * (1 + spread)
    ok = [g for g in guesses if isinstance(g, float) and math.isfinite(g) and (g > near) == up]
    if not ok:
        return lo, hi
    return (lo, max(hi, min(max(ok), far))) if up else (min(lo, max(min(ok), far)), hi)


def interpolate(passed: tuple, failed: tuple) -> float:
    """Where the line through (log load, margin) of the two probes crosses 0."""
    (x0, m0), (x1, m1) = passed, failed
    if m0 is None or m1 is None or m0 == m1:
        return math.sqrt(x0 * x1)
    f = m0 / (m0 - m1)
    return math.exp(math.log(x0) + f * (math.log(x1) - math.log(x0)))


def fmt(v) -> str:
    return "n/a" if v is None else f"{v:.4g}"


def binding(got, objectives) -> str:
    """The objective that binds a probe, its percentile as measured against its limit, and the probe's time."""
    named = [(m, o) for o in objectives if (m := got.margins.get(o.name)) is not None and math.isfinite(m)]
    if not named:
        return ""
    m, o = min(named, key=lambda x: x[0])
    return (f" ({o.name} {o.limit_ms * math.exp(-m):.4g} ms against {o.limit_ms:g}; "
            f"{got.sent} requests in {got.seconds:.1f} s)")


def sent_per_probe(p: "Plan", load: float) -> float:
    """Requests a block's probe sends: the measured ones, and the warm-ups and cool-downs around them."""
    edge = load if p.kind == CLOSED else (p.warmup or max(8, p.requests // 4))
    return p.requests + 2 * edge


def block_seconds(probes: list, levels: dict, sent: Callable[[float], float]) -> float | None:
    """A block's probe time as the bracket measured it: per engine and level, the requests it sends
    times the seconds a client spent per request at the nearest bracket load, over the level's load."""
    total = 0.0
    for engine, loads in levels.items():
        mine = [g for g in probes if g.engine == engine and g.sent and g.seconds]
        if not mine:
            return None
        for load in loads:
            g = min(mine, key=lambda g: abs(math.log(g.load / load)))
            total += sent(load) * (g.seconds * g.load / g.sent) / load
    return total
