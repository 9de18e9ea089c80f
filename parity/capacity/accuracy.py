"""The search's accuracy on the simulator, over seeded trials: how close the capacity ratio comes
to the truth, how often it has the wrong sign, how often its 95 % interval holds the truth, how
many requests it sends, and how close each engine's capacity comes to an exhaustive grid
(tests/unit/test_capacity_accuracy.py holds the acceptance; benchmarks/capacity_accuracy.py
prints it over more trials).

The truth is the simulator's own (never a formula shaped to the search): an exhaustive grid of
every whole number of clients (open loop: 120 rates evenly spaced in log), with no drift, every
load on the same `truth_blocks` prompt sets of the search's probe size, the margins averaged;
its crossing of 0 by parity.capacity.grid."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from parity.capacity.grid import grid
from parity.capacity.probe import CLOSED
from parity.capacity.search import Plan, Search
from parity.capacity.simulator import Drift, ServerModel, Simulator, Workload
from parity.capacity.slo import parse_slo
from parity.stats import adaptive

TRUTH_SEED = 10**6  # the truth's prompt sets: apart from every trial's
ENGINES = ("A", "B")


@dataclass
class Setup:
    lever: float = 1.03  # B's step time over A's
    slo: str = "ttft_p99_ms=500,itl_p99_ms=50"
    kind: str = CLOSED
    model: ServerModel = field(default_factory=ServerModel)
    drift: Drift = field(default_factory=Drift)
    workload: Workload = field(default_factory=Workload)
    until_ci_pct: float = 1.5
    min_blocks: int = 6
    max_blocks: int = 20
    max_requests: int = 40_000
    plan: dict = field(default_factory=dict)  # other Plan fields
    truth_blocks: int = 12
    truth_span: tuple = (0.6, 1.6)  # the truth grid, as factors of a first estimate

    def search_plan(self) -> Plan:
        budget = adaptive.Budget(until_ci_pct=self.until_ci_pct, min_blocks=self.min_blocks, max_blocks=self.max_blocks)
        return Plan(engines=list(ENGINES), reference="A", objectives=parse_slo(self.slo), kind=self.kind, budget=budget,
                    max_requests=self.max_requests, **self.plan)  # fmt: skip

    def simulator(self, seed: int, drift: Drift | None = None) -> Simulator:
        return Simulator(self.model, self.drift if drift is None else drift, {"B": self.lever}, seed, self.kind)

    def prompts(self, seed: int):
        return lambda block, measured, warmup: self.workload.prompts(seed, block, measured, warmup)


def truth(setup: Setup) -> dict:
    """Each engine's capacity from the exhaustive grid with no drift, and the ratio B/A."""
    plan = setup.search_plan()
    sim = setup.simulator(TRUTH_SEED, Drift(0.0, 0.0))
    # where to look: one short search with no drift
    quick = replace(plan, budget=adaptive.Budget(None, 3, 3), max_requests=None)
    first = Search(sim, setup.prompts(TRUTH_SEED), quick).run()
    caps = [first["engines"][e]["capacity"]["value"] for e in ENGINES]
    if any(c is None for c in caps):
        raise ValueError(f"no first estimate for the truth grid: {first['problems']}")
    lo, hi = min(caps) * setup.truth_span[0], max(caps) * setup.truth_span[1]
    if setup.kind == CLOSED:
        loads = list(range(max(1, math.floor(lo)), math.ceil(hi) + 1))
        warm = loads[-1]
    else:
        loads = [lo * (hi / lo) ** (j / 119) for j in range(120)]
        warm = plan.warmup if plan.warmup is not None else max(8, plan.requests // 4)
    sets = {b: setup.workload.prompts(TRUTH_SEED, b, plan.requests, warm) for b in range(setup.truth_blocks)}
    engines = {e: grid(sim, e, plan.objectives, loads, sets) for e in ENGINES}
    a, b = engines["A"]["capacity"], engines["B"]["capacity"]
    return {"engines": engines, "ratio": b / a if a and b else None, "loads": (loads[0], loads[-1])}


def trial(setup: Setup, seed: int, simulator: Simulator | None = None) -> dict:
    r = Search(simulator or setup.simulator(seed), setup.prompts(seed), setup.search_plan()).run()
    ratio = r["ratios"][0] if r["ratios"] else {}
    cap = {e: r["engines"][e]["capacity"] for e in ENGINES}
    return {"seed": seed, **{k: ratio.get(k) for k in ("ratio", "low", "high", "outcome")},
            "blocks": r["stop"]["blocks"], "rule": r["stop"]["rule"], "requests": r["requests"],
            "capacity": {e: cap[e]["value"] for e in ENGINES},
            "capacity_interval": {e: (cap[e]["low"], cap[e]["high"]) for e in ENGINES},
            "binds": {e: r["engines"][e]["binds"] for e in ENGINES}, "problems": r["problems"]}  # fmt: skip


def summarize(trials: list[dict], t: dict, within_pct: float = 1.0, engine_pct: float = 3.0) -> dict:
    """The acceptance's figures over trials against the truth t."""
    truth_ratio = t["ratio"]
    n = len(trials)
    errs = sorted(abs(x["ratio"] / truth_ratio - 1) * 100 if x["ratio"] else math.inf for x in trials)
    wrong = None  # an engine against itself (the grid's own noise aside): no sign to get wrong
    if abs(truth_ratio - 1) > 0.002:
        wrong = sum(1 for x in trials if x["ratio"] is None or (x["ratio"] - 1) * (truth_ratio - 1) <= 0)
    covered = sum(1 for x in trials if x["low"] is not None and x["low"] <= truth_ratio <= x["high"])
    grid_cap = {e: t["engines"][e]["capacity"] for e in ENGINES}
    cells = [(x, e) for x in trials for e in ENGINES]
    eng = sorted(abs(x["capacity"][e] / grid_cap[e] - 1) * 100 if x["capacity"][e] else math.inf for x, e in cells)
    eng_cov = sum(1 for x, e in cells if x["capacity_interval"][e][0] is not None
                  and x["capacity_interval"][e][0] <= grid_cap[e] <= x["capacity_interval"][e][1])  # fmt: skip
    return {
        "trials": n,
        "truth_ratio": truth_ratio,
        "truth_capacity": grid_cap,
        "within_pct": within_pct,
        "share_within": sum(1 for e in errs if e <= within_pct) / n,
        "median_error_pct": errs[n // 2],
        "p90_error_pct": errs[min(n - 1, math.ceil(0.9 * n) - 1)],
        "wrong_sign": wrong,
        "coverage": covered / n,
        "requests_max": max(x["requests"] for x in trials),
        "requests_median": sorted(x["requests"] for x in trials)[n // 2],
        "blocks_median": sorted(x["blocks"] for x in trials)[n // 2],
        "engine_within": sum(1 for e in eng if e <= engine_pct) / len(eng),
        "engine_error_median_pct": eng[len(eng) // 2],
        "engine_error_max_pct": eng[-1],
        "engine_coverage": eng_cov / len(cells),
        "outcomes": {o: sum(1 for x in trials if str(x["outcome"]) == o) for o in {str(x["outcome"]) for x in trials}},
        "stops": {r: sum(1 for x in trials if x["rule"] == r) for r in sorted({x["rule"] for x in trials})},
    }
