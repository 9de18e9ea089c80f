"""What `parity capacity` is asked (CapacityRequest) and the search it runs on real engines
(CapacityPlan): built and checked once by make_plan, before any build, run dir or lock; every
problem is a one-line UsageError (exit 2)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from parity.capacity.probe import CLOSED, OPEN
from parity.capacity.search import Plan
from parity.capacity.slo import parse_slo
from parity.decode import replace
from parity.engines.bound import bind_all
from parity.errors import UsageError
from parity.options import check as check_options
from parity.options import positive_int
from parity.serving.plan import SnapshotPlan
from parity.stats.adaptive import Budget
from parity.stats.budget import StatsDefaults, resolve_budget

BLOCKS = 6  # the search's minimum (docs/CAPACITY.md: fewer blocks hide the shared slope's error)
MIN_PTOK = 32  # the shortest prompt drawn (half of it) still holds a nonce and filler
MIN_GEN = 4  # the shortest output drawn (half of it) still has a gap between tokens


@dataclass
class CapacityRequest:
    """What `parity capacity` asks for; None keeps the profile's value or the search's default."""

    slo: str | None = None  # ttft_p99_ms=500,itl_p99_ms=50
    engines: list[str] | None = None
    model: str | None = None
    attainment: float | None = None  # the share of samples within each limit, a fraction (0.99)
    load: str = CLOSED  # concurrency (closed loop) or rate (open loop)
    start: float | None = None  # the bracket's first load
    max_load: float | None = None
    requests: int | None = None  # measured requests per probe of a block
    repeat: int | None = None  # blocks (with --until-ci: the minimum)
    until_ci: float | str | None = None
    max_repeats: int | None = None
    budget_s: float | None = None
    ptok: int | None = None  # mean prompt tokens (each request draws from half to 1.5 times it)
    gen: int | None = None  # mean generated tokens (likewise)
    parallel: int | None = None  # llama-server --parallel (default serving.parallel)
    gates: bool = True
    dry_run: bool = False


@dataclass
class CapacityPlan:
    model: str
    engines: list[str]
    reference: str
    ptok: int  # means; each request draws its own lengths (parity.capacity.real.lengths)
    gen: int
    serving: SnapshotPlan  # the bound engines, their model files and request limits, the server shape
    search: Plan
    seed: int = 0
    notes: list[str] = field(default_factory=list)


def make_plan(profile, req: CapacityRequest) -> CapacityPlan:
    check_options(repeat=req.repeat, until_ci=req.until_ci, max_repeats=req.max_repeats, budget_s=req.budget_s)
    if req.load not in (CLOSED, OPEN):
        raise UsageError(f"--load {req.load!r}: {CLOSED} (clients, closed loop) or {OPEN} (requests per second, "
                         "open loop)")  # fmt: skip
    if req.slo is None:
        raise UsageError("no objective: give --slo, e.g. --slo ttft_p99_ms=500,itl_p99_ms=50")
    att = 0.99 if req.attainment is None else req.attainment
    if isinstance(att, bool) or not isinstance(att, (int, float)) or not 0 < att < 1:
        raise UsageError(f"--attainment {att!r}: a fraction strictly between 0 and 1 (0.99: 99 % of samples within "
                         "the limit)")  # fmt: skip
    objectives = parse_slo(req.slo, att * 100)
    for name, v, low in (("--ptok", req.ptok, MIN_PTOK), ("--gen", req.gen, MIN_GEN), ("--requests", req.requests, 10),
                         ("--parallel", req.parallel, 1)):  # fmt: skip
        if v is not None and not (positive_int(v) and v >= low):
            raise UsageError(f"{name} must be an integer >= {low}, got {v!r}")
    start = load_value(req.start, "--start", req.load, 1.0)
    max_load = load_value(req.max_load, "--max-load", req.load, 4096.0)
    if max_load <= start:
        raise UsageError(f"--max-load {max_load:g} must be above --start {start:g}")
    s = profile.serving
    engines = req.engines or list(s.engines)
    if not engines:
        raise UsageError(f"profile {profile.name}: no serving engines (serving.engines or --engines)")
    if len(set(engines)) != len(engines):
        raise UsageError(f"--engines: an engine is listed twice ({', '.join(engines)}); name a second engine with "
                         "the same build for an A/A")  # fmt: skip
    model = req.model or s.model
    if not model:
        raise UsageError("no model to serve (serving.model or --model)")
    reference = s.reference_engine if s.reference_engine in engines else engines[-1]
    budget = make_budget(profile.stats, req, len(engines))
    bound = bind_all(profile, engines)  # the one lookup by name (an unknown engine: a one-line ConfigError)
    served = any(b.kind.model_source for b in bound.values())  # an endpoint alone reads no model here
    if served and model not in profile.models and not Path(model).expanduser().exists():
        known = ", ".join(profile.models) or "none"
        raise UsageError(f"--model {model!r}: neither a model of profile {profile.name} ({known}) nor a file")
    ptok, gen = req.ptok or s.ptok, req.gen or s.gen
    if ptok < MIN_PTOK or gen < MIN_GEN:
        raise UsageError(f"serving.ptok {ptok} / serving.gen {gen}: capacity needs ptok >= {MIN_PTOK} and gen >= "
                         f"{MIN_GEN} (--ptok, --gen)")  # fmt: skip
    serving = serving_plan(profile, bound, model, reference, ptok, gen, req.parallel or s.parallel, budget)
    n = req.requests or 300
    search = Plan(engines=list(engines), reference=reference, objectives=objectives, kind=req.load, start=start,
                  min_load=1.0 if req.load == CLOSED else start / 64, max_load=max_load, requests=n,
                  bracket_requests=max(20, n // 3), arms="engine", threshold_pct=profile.stats.min_delta_pct,
                  confidence=profile.stats.confidence, budget=budget)  # fmt: skip
    plan = CapacityPlan(model, list(engines), reference, ptok, gen, serving, search)
    for e, eng in bound.items():
        slots = eng.queue_limit(serving.shape)
        if req.load == CLOSED and slots is not None and max_load > slots:
            plan.notes.append(f"{e} runs {slots} requests at once: clients past them wait in its queue, and their "
                              "time to first token counts that wait")  # fmt: skip
        plan.notes += [f"{e}: {c}" for c in eng.load_caveats(serving.shape)]
    return plan


def serving_plan(profile, bound: dict, model: str, reference: str, ptok: int, gen: int, parallel: int,
                 budget: Budget) -> SnapshotPlan:
    """The engines' servers as the serving sweep starts them (parity.serving.sweep), their model
    files and request limits; the shape holds the longest request drawn, checked against each
    engine's limit (a one-line UsageError)."""
    shape = replace(profile.serving, ptok=longest(ptok), gen=longest(gen), parallel=parallel, npl=[parallel])
    path = profile.models[model].path if model in profile.models else None
    plan = SnapshotPlan(model, list(bound), reference, [parallel], 1, shape, [], bound=bound, stats=profile.stats,
                        model_path=path, budget=budget)  # fmt: skip
    for e, eng in bound.items():
        plan.model_files[e] = eng.model_file(model)
        need = eng.context_need(shape, eng.local_model_file(model))
        if need.tokens is None:
            continue
        plan.limits[e], plan.limit_what[e] = need.tokens, need.what
        if shape.ptok + shape.gen > need.tokens:
            raise UsageError(f"the longest request drawn ({shape.ptok} prompt + {shape.gen} generated tokens: "
                             f"1.5 x --ptok, --gen) does not fit engine {e}: it gives a request {need.tokens} "
                             f"tokens, set by {need.what}")  # fmt: skip
    return plan


def load_value(v, flag: str, kind: str, default: float) -> float:
    """--start / --max-load: a positive number (whole clients in a closed loop)."""
    if v is None:
        return default
    ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and v > 0
    if not ok or (kind == CLOSED and (v < 1 or v != int(v))):
        what = "a whole number of clients >= 1" if kind == CLOSED else "a positive number of requests per second"
        raise UsageError(f"{flag} {v!r}: {what}")
    return float(v)


def make_budget(st, req: CapacityRequest, engines: int) -> Budget:
    """Blocks: a fixed number (--repeat, default 6), or --until-ci PCT on the capacity ratio's
    conservative half-width (at least --repeat, at most --max-repeats, within --budget-s)."""
    lo = req.repeat if req.repeat is not None else BLOCKS
    if lo < 2:
        raise UsageError(f"--repeat {lo}: an interval over blocks needs at least 2 ({BLOCKS} recommended)")
    return resolve_budget(
        req.until_ci, req.max_repeats, req.budget_s, lo, StatsDefaults.of(st), watched=(), use_defaults=False,
        unwatched="--until-ci {value!r}: capacity watches one interval, the capacity ratio's: give PCT",
        too_few="--max-repeats {hi} is below the minimum of {lo} blocks (--repeat)", lone_bounds="blocks",
        refusals=["--until-ci needs two engines: it watches the capacity ratio's interval"] if engines < 2 else [])


def longest(mean: int) -> int:
    """The longest length drawn around a mean (parity.capacity.real.lengths)."""
    return mean * 3 // 2
