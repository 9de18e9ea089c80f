"""An exhaustive grid: one engine probed at every load of a list, each load on the same prompt
sets, margins averaged over them.  The reference the search is held to (on the simulator:
every whole number of clients, no drift), and what a user without a search would run."""

from __future__ import annotations

import math
from typing import Sequence

from parity.capacity.probe import Probe, PromptSet
from parity.capacity.search import interpolate
from parity.stats.linfit import line


def grid(probe: Probe, engine: str, objectives: Sequence, loads: Sequence[float], prompt_sets: dict[int, PromptSet],
         window: float = 0.08) -> dict:
    """{"rows": per load the mean margin per objective, "capacity": the lowest objective's
    crossing of 0, "step": the largest load below the first that fails, "binds": that
    objective, "objectives": each one's crossing}.  An objective's crossing: the first sign
    change scanning up the loads, then a least-squares line of the margin on log(load) through
    the grid's loads within `window` of it (a grid of whole clients steps by 1-3 % near the
    crossing, and each load's mean margin keeps some noise of its own); None where the
    margin never falls below 0 on the grid (or is below 0 at the first load)."""
    rows = []
    for load in sorted(loads):
        ms = {o.name: [] for o in objectives}
        for block, ps in prompt_sets.items():
            r = probe(engine, load, block, ps)
            for o in objectives:
                m = o.margin(r)
                if m is not None and math.isfinite(m):
                    ms[o.name].append(m)
        rows.append({"load": load, "margins": {k: (sum(v) / len(v) if v else None) for k, v in ms.items()}})
    per_obj = {o.name: first_crossing(rows, o.name, window) for o in objectives}
    finite = {k: v for k, v in per_obj.items() if v is not None}
    binds = min(finite, key=finite.get) if finite else None
    step = None
    for row in rows:
        if any(m is None or m < 0 for m in row["margins"].values()):
            break
        step = row["load"]
    return {"rows": rows, "objectives": per_obj, "binds": binds, "capacity": finite.get(binds), "step": step}


def first_crossing(rows: list[dict], name: str, window: float) -> float | None:
    prev = None
    for row in rows:
        m = row["margins"][name]
        if m is None:
            return None
        if m < 0:
            if prev is None:
                return None
            x = interpolate((prev["load"], prev["margins"][name]), (row["load"], m))
            near = [r for r in rows if abs(math.log(r["load"] / x)) <= window and r["margins"][name] is not None]
            fit = line([math.log(r["load"]) for r in near], [r["margins"][name] for r in near])
            if fit.slope is None or fit.slope >= 0:
                return x
            return math.exp(-fit.intercept / fit.slope)
        prev = row
    return None
