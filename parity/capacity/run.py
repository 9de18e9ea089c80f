"""`parity capacity`: the capacity search (parity.capacity.search) on real engines, gated and
locked like the serving snapshot: the plan checked first (parity.capacity.plan), builds and the
model before the lock, then the search's probes on the engines' servers (parity.capacity.real)
under session.measured, then capacity.json in the run dir."""

from __future__ import annotations

from functools import partial

from parity import session
from parity.capacity import energy
from parity.capacity.plan import CapacityPlan, CapacityRequest, longest, make_plan
from parity.capacity.probe import CLOSED
from parity.capacity.real import RealProbe, lengths
from parity.capacity.search import Search, rising
from parity.context import Run, run_session
from parity.gates.prepost import GateSpec
from parity.serving import snapshot
from parity.stats.blocks import block_order

UNITS = {CLOSED: "clients", "rate": "requests/s"}


def capacity(ctx, req: CapacityRequest) -> dict:
    """The dry run's plan (nothing started, nothing written), or a run dir with capacity.json."""
    plan = make_plan(ctx.profile, req)
    snapshot.check_env(plan.serving, ctx.profile.policy, [])  # the forbidden bench knobs, dry run or not
    if req.dry_run:
        problems = {e: session.served_model_problem(ctx, e, plan.model) for e in plan.engines}
        served = snapshot.dry_run(plan.serving, ctx.runner, ctx.out, ctx.profile.lock, problems)
        return dry_run(plan, served, req.gates)
    session.refuse_missing_programs(ctx, plan.engines)
    with run_session(ctx, "capacity", f"capacity-{plan.model}"):
        if not req.gates:
            ctx.run.mark_invalid("ungated: --no-gates")
        spec = GateSpec.from_profile(ctx.profile) if req.gates else None
        doc = session.measured(ctx, plan.engines, partial(measure, plan), gates=spec, serve=plan.model)
        return {"run_dir": str(ctx.run.path), **doc}


def measure(plan: CapacityPlan, run: Run) -> dict:
    """The search on the engines' servers; capacity.json (the search's result, every probe's and
    every server run's summary); the run marked invalid when the result names a problem."""
    probe = RealProbe(run, plan)
    result: dict = {}
    try:
        search = Search(probe, lengths(plan.ptok, plan.gen, plan.seed), plan.search, log=run.out.info)
        result = search.run()
        probe.close()  # the last server stopped, its memory back: an error here keeps the search's result
    except BaseException as e:
        probe.close(settle=False)
        # nothing measured is lost: the probes so far, marked incomplete with the reason (the run dir says failed)
        why = " ".join(str(e).split()) or type(e).__name__
        try:
            run.dir.write_json("capacity.json", {**document(plan, probe, result, False), "error": why, "valid": False})
        except OSError as w:  # (a full disk): the error that ended the run is the one to report
            run.out.warn(f"capacity.json (incomplete) not written: {w}")
        raise
    doc = document(plan, probe, result, True)
    doc["energy"] = energy.per_engine(probe.probes, plan.engines)
    doc["energy_ratios"] = energy.paired_ratios(probe.probes, plan.engines, plan.reference,
                                                plan.search.threshold_pct, plan.search.confidence)
    doc["valid"] = not doc["problems"]
    run.dir.write_json("capacity.json", doc)
    if doc["problems"]:
        run.dir.mark_invalid(f"{len(doc['problems'])} problem(s), first: {doc['problems'][0]}")
    return doc


def document(plan: CapacityPlan, probe: RealProbe, result: dict, complete: bool) -> dict:
    """capacity.json's body: the search's result (what it got to) beside every probe and server run."""
    return {"model": plan.model, "units": UNITS[plan.search.kind], "prompts": prompts_rule(plan), "complete": complete,
            **result, "probes": probe.probes, "servers": probe.servers, "plan_notes": plan.notes}  # fmt: skip


def prompts_rule(plan: CapacityPlan) -> str:
    (p0, p1), (g0, g1) = spans(plan.ptok), spans(plan.gen)
    return (f"per request {p0}..{p1} prompt and {g0}..{g1} generated tokens (uniform, seeded by the block); token "
            "ids: a nonce drawn from the block's seed and the probe's place on its server, then filler: the same ids "
            "for every engine of a block")  # fmt: skip


def spans(mean: int) -> tuple[int, int]:
    return -(-mean // 2), longest(mean)


def dry_run(plan: CapacityPlan, served: dict, gates: bool) -> dict:
    """What the real run executes, in the order it does (served: the serving dry run's commands
    and preflight for the same engines and shape)."""
    p, u = plan.search, UNITS[plan.search.kind]
    n = p.budget.min_blocks
    order = [f"block {b}: " + ", ".join(f"{e} (levels {'up' if rising(b, len(p.engines)) else 'down'})"
                                        for e in block_order(list(p.engines), b, p.order))
             for b in range(min(n, 4))]  # fmt: skip
    if p.kind == CLOSED:
        per_probe = ("one warm-up request per client, then the measured ones, then one cool-down per client "
                     "(each client sends its next request when its last one ends)")  # fmt: skip
    else:
        per_probe = (f"{p.warmup or max(8, p.requests // 4)} warm-up requests, the measured ones, as many "
                     "cool-downs, at seeded Poisson times")  # fmt: skip
    warm = plan.serving.shape.warmup.requests
    return {
        "model": plan.model,
        "engines": plan.engines,
        "reference": plan.reference,
        "ratio": [f"{e} / {plan.reference}" for e in plan.engines if e != plan.reference],
        "objectives": [o.describe() for o in p.objectives],
        "load": f"{p.kind} ({u})",
        "bracket": (f"per engine on its own server: from {p.start:g} {u}, doubling until an objective fails (a "
                    f"failure on the way up probed again on other prompts), halving when it fails at {p.start:g}; "
                    f"then {p.refine} regula-falsi probes; {p.bracket_requests} measured requests a probe; bounds "
                    f"{p.min_load:g}..{p.max_load:g} {u}"),
        "levels": (f"{p.levels} loads per engine evenly spaced in log(load) over its estimate -+{p.spread_pct:g} %, "
                   "the same factors for every engine; moved to the running estimates after the first blocks"),
        "blocks": (f"every engine's server started once per block (started, warmed up with {warm} requests, its "
                   f"levels probed, stopped, its memory back); {p.requests} measured requests a probe: {per_probe}"),
        "prompts": prompts_rule(plan),
        "stop": p.budget.describe(),
        "order": order + (["... (the rotation continues)"] if n > 4 or p.budget.adaptive else []),
        "gates": "the profile's gate set before and after" if gates else "none (--no-gates: the run is marked ungated)",
        "notes": plan.notes,
        "plan": p.as_dict(),
        "commands": served["commands"],
        "preflight": served["preflight"],
        "lock_dir": served["lock_dir"],
        "port": plan.serving.shape.port,
        "port_free": served["port_free"],
    }
