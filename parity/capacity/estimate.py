"""From the blocks' probes to capacities: per engine and objective one slope over every block
(parity.capacity.curves), the objective that binds, each block's capacity, and the per-engine
summary the result carries."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from parity.capacity.curves import crossing, geo_interval, mean_interval, pct_per_pct, pooled_slope
from parity.stats import usable

HOLDS = "every objective holds at every level"


@dataclass
class Probed:
    """One probe as the search keeps it: its margins and what the frontier reads."""

    engine: str
    load: float
    block: int  # < 0: a bracket probe
    margins: dict  # objective name -> margin (None: no sample)
    attainment: dict  # objective name -> share within the limit
    throughput_tps: float  # per GPU
    user_tps: float
    sent: int
    seconds: float
    problems: list = field(default_factory=list)

    @property
    def margin(self) -> float | None:
        ms = list(self.margins.values())
        return None if any(m is None for m in ms) else min(ms)

    def to_dict(self) -> dict:
        return {"engine": self.engine, "load": self.load, "block": self.block, "margins": rounded(self.margins),
                "attainment": rounded(self.attainment), "throughput_tps": num(self.throughput_tps),
                "user_tps": num(self.user_tps), "sent": self.sent, "seconds": num(self.seconds),
                "problems": self.problems}  # fmt: skip


def estimates(blocks: list[dict], engines: list[str], objectives: list) -> tuple[dict, dict]:
    """({engine: {block: capacity_of(...)}}, {engine: {binds, slopes, crossings}}).  Per engine and
    objective one slope over every block; the objective whose line through all the engine's
    points crosses 0 lowest binds; a block's capacity is that objective's crossing in the block.
    (The lowest crossing block by block would let an objective with a heavy tail, a p99 TTFT of
    a few hundred requests, undercut the binding one in a block where a few long prompts met,
    for one engine and not the other.)"""
    per_block: dict = {}
    pooled: dict = {}
    for e in engines:
        lines = {o.name: [points(b["probes"][e], o.name) for b in blocks] for o in objectives}
        slopes = {k: pooled_slope(v) for k, v in lines.items()}
        over_all = {k: crossing([x for xs, _ in v for x in xs], [m for _, ms in v for m in ms], slopes[k])
                    for k, v in lines.items()}  # fmt: skip
        finite = {k: c.load for k, c in over_all.items() if c.load is not None and math.isfinite(c.load)}
        binding = min(finite, key=finite.get) if finite else None
        pooled[e] = {"binds": binding, "slopes": slopes, "crossings": {k: c.load for k, c in over_all.items()}}
        per_block[e] = {b["block"]: capacity_of({k: crossing(*lines[k][i], slopes[k]) for k in lines}, binding,
                                                rising=binding is not None and rises(*lines[binding][i]))
                        for i, b in enumerate(blocks)}  # fmt: skip
    return per_block, pooled


def rises(loads: list, margins: list) -> bool:
    """Whether a block's own margins (3 levels or more) do not fall with the load.  The pooled slope
    would still place a crossing there, but one that sits where the block's levels are, not where its
    data put it: on a 2-core box beside two CPU hogs such blocks, at levels set apart by the brackets,
    made an A/A read "regressed"."""
    if sum(1 for m in margins if m is not None and usable(m)) < 3:
        return False
    own = pooled_slope([(loads, margins)])  # it skips the levels without a margin
    return own is not None and own >= 0


def points(probes: list, objective: str) -> tuple[list, list]:
    """One block's (loads, margins) of one engine for one objective."""
    return [g.load for g in probes], [g.margins[objective] for g in probes]


def capacity_of(per_obj: dict, binding: str | None, rising: bool = False) -> dict:
    """A block's capacity for one engine: the binding objective's crossing (None given: the
    lowest in the block).  A crossing far past the levels is no capacity, only a `guess` of where
    the levels belong; nor is one of a block whose binding margins `rising` with the load (rises)."""
    finite = {k: c.load for k, c in per_obj.items() if c.load is not None}
    lowest = min(finite, key=finite.get) if finite and not all(math.isinf(v) for v in finite.values()) else None
    binds = binding or lowest
    cap, why, guess = None, "", None
    c = per_obj.get(binds) if binds else None
    if c is None:
        why = "; ".join(f"{k}: {x.why}" for k, x in per_obj.items() if x.load is None) or HOLDS
    elif c.load is None:
        why = f"{binds}: {c.why}"
    elif math.isinf(c.load):
        why, guess = f"{binds}: {c.why or HOLDS}", "inf"
    else:
        guess, why = c.load, c.why
        cap = None if c.far else c.load
        if rising and cap is not None:
            cap, why = None, f"{binds}: its margins do not fall with the load over the block's levels (its crossing " \
                             "would be where the levels are, not where its data put it)"
    return {"capacity": cap, "binds": binds if cap is not None else None, "lowest": lowest, "why": why, "guess": guess,
            "outside": bool(c is not None and c.outside),
            "crossings": {k: load_of(x.load) for k, x in per_obj.items()}}  # fmt: skip


def engine_summary(blocks: list[dict], engine: str, per_block: dict, pooled: dict, objectives: list,
                   confidence: float) -> dict:
    """What the result says of one engine: its capacity over the blocks, the objective that
    binds, each objective's capacity and slope, and the margin curves."""
    rows = list(per_block.values())
    objs = {}
    for o in objectives:
        xs = [v["crossings"][o.name] for v in rows]
        objs[o.name] = {"capacity": load_of(pooled["crossings"].get(o.name)),
                        "slope": num(pooled["slopes"].get(o.name)),
                        "blocks": rounded(geo_interval([x for x in xs if isinstance(x, float)], confidence)),
                        "holds_everywhere": sum(1 for x in xs if x == "inf")}  # fmt: skip
    lowest = [v["lowest"] for v in rows if v["lowest"]]
    return {
        "capacity": rounded(geo_interval([v["capacity"] for v in rows if v["capacity"] is not None], confidence)),
        "binds": pooled["binds"],
        # the binding limit on a flat stretch of its percentile: a little noise moves the capacity far
        "capacity_pct_per_pct": num(pct_per_pct(pooled["slopes"].get(pooled["binds"])), 4),
        "lowest_per_block": {k: lowest.count(k) for k in sorted(set(lowest))},
        "objectives": objs,
        "blocks_without_capacity": [f"block {k}: {v['why']}" for k, v in per_block.items() if v["capacity"] is None],
        "blocks_outside_levels": sum(1 for v in rows if v["outside"]),
        "curves": curves(blocks, engine, objectives, confidence),
    }


def curves(blocks: list[dict], engine: str, objectives: list, confidence: float) -> list[dict]:
    """Per load probed in blocks and objective: the margin and the attainment less its target,
    mean and t interval over the blocks that ran that load."""
    by_load: dict = {}
    for b in blocks:
        for g in b["probes"][engine]:
            by_load.setdefault(g.load, []).append(g)
    out = []
    for load in sorted(by_load):
        gs = by_load[load]
        for o in objectives:
            m = mean_interval([g.margins[o.name] for g in gs if g.margins[o.name] is not None], confidence)
            a = mean_interval([g.attainment[o.name] * 100 - o.pct for g in gs if g.attainment[o.name] is not None],
                              confidence)  # fmt: skip
            out.append({"load": load, "objective": o.name, "blocks": m["n"], "margin": rounded(m),
                        "attainment_minus_target_pct": rounded(a)})  # fmt: skip
    return out


def load_of(x):
    """A crossing as JSON holds it: "inf" where the objective never falls to 0."""
    return "inf" if isinstance(x, float) and math.isinf(x) else num(x)


def num(v, digits: int = 6):
    return round(v, digits) if isinstance(v, float) and math.isfinite(v) else (None if isinstance(v, float) else v)


def rounded(d: dict) -> dict:
    return {k: num(v) for k, v in d.items()}
