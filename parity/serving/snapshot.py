"""Same-session serving snapshot: every engine over every N, repeats in ABAB (or ABBA,
AABB) order, gated and locked, with the users' metrics and validity rules.

Order of work, as the users' harness does it and better: check the plan (shapes
against the context each engine will really give a request) before anything
starts; build engines before the GPU lock; take the lock; hardware.txt; pre-gates;
per (repeat, engine) an arm (parity.serving.sweep: server, warmup, every N, stop,
memory back); post-gates; summary.json / parity_summary.tsv / summary.tsv
(parity.serving.summary)."""

from __future__ import annotations

from pathlib import Path

from parity.decode import replace
from parity import session
from parity.stats.adaptive import MAX_REPEATS, TIME_BUDGET, Budget
from parity.stats.budget import StatsDefaults, resolve_budget
from parity.stats import canary
from parity.context import Run
from parity.engines.bound import bind_all
from parity.errors import UsageError
from parity.gates.base import gate_inputs
from parity.gates.kinds import GATES, red_in_summary
from parity.gates.prepost import GateSpec, binary_gates
from parity.options import check as check_options
from parity.options import positive_int
from parity.stats.calibrate import calibration_off
from parity.context import run_session
from parity.efficiency.roofline import lines
from parity.engines.envpolicy import check_bench_env
from parity.engines.server import answering
from parity.ports import port_free
from parity.results.model import PointRow
from parity.context import dry_run_session
from parity.gonogo import command_paths, go_no_go, not_answering
from parity.gpu.lock import effective_dir as lock_effective_dir, preflight
from parity.metrics.registry import definitions, direction
from parity.options import check_step_options
from parity.serving import crossover, logs, summary, workload_summary
from parity.serving.efficiency import for_snapshot
from parity.serving.plan import SnapshotPlan, SnapshotRequest
from parity.serving.slots import size_for_npl
from parity.serving import rounds
from parity.serving.sweep import run_arm
from parity.serving.workloads import attach, resolve
from parity.stats.blocks import block_line, block_order, half_widths, run_blocks
from parity.stats.calibrate import WINDOWS, choose, outran, outran_line
from parity.ttft import summary as ttft_summary
from parity.workloads.calibration import choose_for, plan_text, why_off, with_value
from parity.workloads.defaults import parse_options


def make_plan(profile, req: SnapshotRequest) -> SnapshotPlan:
    """The sweep to run, checked, with its engines bound once (their model files, request limits,
    env): every problem here is a one-line UsageError (exit 2) before the lock is taken or any
    server starts."""
    s = profile.serving
    over = {k: getattr(req, k) for k in ("ptok", "gen", "parallel", "ctx", "order") if getattr(req, k) is not None}
    # here, not in the CLI: campaign steps come through this function too
    check_options(repeat=req.repeat, until_ci=req.until_ci, max_repeats=req.max_repeats, budget_s=req.budget_s, order=req.order)
    for key in ("ptok", "gen", "parallel", "ctx"):
        v = getattr(req, key)
        if v is not None and not positive_int(v):
            raise UsageError(f"--{key} must be a positive integer, got {v!r}")
    npl, engines = req.npl, req.engines
    if npl is not None and not (npl and all(map(positive_int, npl))):
        raise UsageError(f"--npl: expected positive integers, got {npl!r}")
    if npl:
        over["npl"] = npl
    s = replace(s, **over)
    workload, name, options = None, req.workload, parse_options(req.workload_opts)
    if req.trace is not None:  # --trace FILE: the trace workload's `trace` field
        name, options = name or "trace", {**options, "trace": req.trace}
    if name is not None:  # workload hook: parity.serving.workloads
        workload = resolve(profile, name, s, npl=req.npl, options=options)
    engines = engines or s.engines
    if not engines:
        raise UsageError(f"profile {profile.name}: no serving engines (serving.engines or --engines)")
    if len(set(engines)) != len(engines):
        raise UsageError(f"--engines: an engine is listed twice ({', '.join(engines)}); use --repeat for repeats")
    bound = bind_all(profile, engines)  # the one lookup by name (an unknown engine: a one-line ConfigError)
    sized = None
    if workload is None:  # a workload checks its own concurrency (attach, below)
        s, sized = size_for_npl(bound, s, req.parallel is not None)
    model = req.model or s.model
    if not model:
        raise UsageError("no model to serve (serving.model or --model)")
    if model not in profile.models and not Path(model).expanduser().exists() and any(b.kind.model_source for b in bound.values()):
        raise UsageError(f"--model {model!r}: neither a model of profile {profile.name} ({', '.join(profile.models) or 'none'}) nor a file")
    gpus = crossover.parse_gpus(req.gpus)
    gpus = s.gpus if gpus is None else gpus
    crossover.check(gpus, list(engines), s.order, workload, bound, s.port)
    repeat = req.repeat or s.repeat
    ref = s.reference_engine if s.reference_engine in engines else (engines[-1] if len(engines) > 1 else None)
    order = run_order(list(engines), repeat, s.order)
    m = profile.models.get(model)
    plan = SnapshotPlan(model, list(engines), ref, list(s.npl), repeat, s, order, sized=sized, bound=bound,
                        stats=profile.stats, model_path=m.path if m is not None else None, gpus=list(gpus))
    plan.budget = make_budget(profile.stats, req, plan, workload)
    if workload is not None:  # a built-in's sized field (parity.workloads.calibration)

        plan.calibration_off = why_off(s, workload, req.gen is not None)
    else:  # an explicit --gen (or a step's gen) is respected exactly
        plan.calibration_off = calibration_off(s, req.gen is not None)
    plan.calibrate = s.calibrate if plan.calibration_off is None else None
    for e, eng in bound.items():
        plan.model_files[e] = eng.model_file(model)
        need = eng.context_need(s, eng.local_model_file(model))
        if need.tokens is not None:
            plan.limits[e], plan.limit_what[e] = need.tokens, need.what
        if workload is None:  # a workload checks its own shapes (attach, below)
            check_shape(plan, e, s.ptok, s.gen, "the sweep")
        if s.warmup.requests:
            check_shape(plan, e, s.ptok, s.warmup.gen, "the warmup")
    if workload is not None:
        attach(plan, workload)
    return plan


def make_budget(st, req: SnapshotRequest, plan: SnapshotPlan, workload) -> Budget:
    """The stop rule's budget: fixed (repeat blocks) or --until-ci's (at least repeat and
    2 blocks, at most --max-repeats, within --budget-s); --until-ci PCT or METRIC=PCT,... replaces
    the profile's stats.until_ci_pct and until_ci_targets.  st: the profile's stats section."""
    kind = workload.kind_obj if workload is not None else None
    stops = (*kind.stop_metrics, *kind.headline) if kind is not None and kind.stop_metrics else ()  # its headline too
    cannot = [why for bad, why in (
        (workload is not None and not stops, "--until-ci stops on the N sweep's headline intervals; a workload "
                                             "has its own points (run it with --repeat N)"),
        (plan.reference is None or len(plan.engines) < 2,
         "--until-ci needs two engines: its intervals are paired ratios against the reference engine"),
        (plan.shape.order == "aabb",
         "--until-ci adds blocks (every engine once, back to back); --order aabb has none: use abab or abba"),
    ) if bad]
    budget = resolve_budget(
        req.until_ci, req.max_repeats, req.budget_s, plan.repeat, StatsDefaults.of(st),
        watched=stops or st.metrics, use_defaults=not stops,
        unwatched=(f"--until-ci: {{metric}} is not one the {workload.kind} workload's stop rule watches "
                   f"({', '.join(stops)})" if stops else
                   f"--until-ci: {{metric}} is not a headline metric the stop rule watches (stats.metrics: "
                   f"{', '.join(st.metrics)})"),
        too_few=f"--max-repeats {{hi}} is below the minimum of {{lo}} blocks (--repeat/serving.repeat {plan.repeat}, "
                "and an interval needs 2)",
        floor=2, lone_bounds="repeats", refusals=cannot)
    if stops and budget.until_ci_pct is not None:  # a bare PCT would watch nothing: the kind's metrics are named
        raise UsageError(f"--until-ci on a {workload.kind} workload names what it waits on: METRIC=PCT,... with "
                         f"METRIC one of {', '.join(stops)} (e.g. --until-ci {stops[1]}=2)")
    return budget


def check_shape(plan: SnapshotPlan, engine: str, ptok: int, gen: int, what: str) -> None:
    """Token prompts have a known length: refuse a shape the engine cannot give a request.
    (Word prompts are checked once tokenized, before the first request.)"""
    limit = plan.limits.get(engine)
    if plan.shape.prompt == "tokens" and limit and ptok + gen > limit:
        raise UsageError(f"{what}: {ptok} prompt + {gen} generated tokens do not fit engine {engine}: it gives a request {limit} tokens, set by {plan.limit_what[engine]}")


def run_order(engines: list[str], repeat: int, order: str) -> list[tuple[int, str]]:
    """abab: A B A B (every repeat in engine order); abba: repeat r runs the engines rotated
    by r (two engines: A B B A, cancels linear drift; three: ABC BCA CAB, each engine in each
    slot); aabb: every repeat of A, then of B (not blocks: no engine pair runs back to back)."""
    if order == "aabb":
        return [(r, e) for e in engines for r in range(repeat)]

    return [(r, e) for r in range(repeat) for e in block_order(engines, r, order)]


def snapshot(ctx, req: SnapshotRequest) -> dict:
    """`parity snapshot`: the dry-run plan, or a run directory with the gated sweep's summary."""

    plan = make_plan(ctx.profile, req)
    check_env(plan, ctx.profile.policy, req.allow_env)  # the forbidden bench knobs: refused before the run dir, dry run or not
    if req.dry_run:
        too_few = crossover.host_problem(ctx.runner, plan.gpus, plan.bound)  # crossover's GPUs on this host
        problems = {e: session.served_model_problem(ctx, e, plan.model) for e in plan.engines}
        doc = dry_run(plan, ctx.runner, ctx.out, ctx.profile.lock, problems)
        more = not_answering(doc["commands"]) + ([{"kind": "gpus", "what": too_few}] if too_few else [])
        with dry_run_session(ctx, "snapshot", f"snapshot-{plan.model}") as rd:  # the users' DRY_RUN=1: a go/no-go with its evidence
            doc["go_no_go"] = go_no_go(ctx.as_run(), ctx.profile.lock, ctx.profile.hardware_class,
                                       paths=command_paths(ctx.runner, doc["commands"]), ports=server_ports(plan),
                                       more=more)
            doc["run_dir"] = str(rd.path)
            rd.write_json("plan.json", doc)
        return doc
    session.refuse_missing_programs(ctx, plan.engines)  # the dry run's NO GO for a missing program, refused before the run dir
    crossover.refuse(ctx.runner, plan)  # the dry run's NO GO for its GPUs and ports, before the run dir and the lock
    if plan.sized:
        ctx.out.info(plan.sized)
    with run_session(ctx, "snapshot", f"snapshot-{plan.model}"):
        if not req.gates:
            ctx.run.mark_invalid("ungated: --no-gates")
        spec = gate_spec(ctx.profile, req.gates)
        arms = session.measured(ctx, plan.engines, lambda run: sweep_all(plan, run), gates=spec, serve=plan.model,
                                gpus=crossover.used(plan.gpus))
        doc = write_summary(plan, ctx.as_run(), arms, binary_gates(gate_inputs(ctx.profile), plan.engines, spec))
        return {"run_dir": str(ctx.run.path), **doc}


def gate_spec(profile, gates: bool) -> GateSpec | None:
    """The profile's gate set around the sweep (None: ungated)."""
    return GateSpec.from_profile(profile) if gates else None


def check_env(plan: SnapshotPlan, policy, allow_env) -> None:
    """The forbidden bench knobs (policy: the profile's) in each engine's env: a one-line UsageError."""
    for e, eng in plan.bound.items():
        check_bench_env(eng.env(), policy, allow_env, context=f"benchmark (engine {e})")


def dry_run(plan: SnapshotPlan, runner, out, lock, model_problems: dict[str, str | None]) -> dict:
    """The plan the real run executes (lock: the profile's lock section; model_problems: engine ->
    why its model cannot be served yet, session.served_model_problem)."""
    commands = []
    at = server_ports(plan)
    gpus = crossover.used(plan.gpus)
    port_of = crossover.ports(plan.engines, plan.shape.port) if gpus else dict.fromkeys(plan.engines, plan.shape.port)
    first = crossover.placement(plan.engines, gpus, 0) if gpus else {}
    shares = crossover.cpu_shares(plan.shape.telemetry, runner, gpus) if gpus else {}
    for e, eng in plan.bound.items():
        mf, model_error = plan.model_files[e], model_problems.get(e)
        try:
            la = eng.launch(mf, port_of[e], plan.shape, dry=True, model=plan.model, out=out)
            if e in first:  # crossover: block 0's GPU (the next block swaps them)
                la = crossover.pinned(la, first[e])
            sec = eng.section
            commands.append({"engine": e, "argv": la.argv, "env": la.env, "unset": la.unset, "ready": f"http://{la.host}:{la.port}{la.ready_path}",
                             "start": la.start, "stop": la.stop, "spawned": la.spawned, **({} if la.spawned else {"answering": answering(la, sec.ready_probe_timeout_s)}),
                             "served_name": None if model_error else la.served_name, "model_error": model_error,
                             "ready_timeout_s": sec.ready_timeout_s, "ready_probe_timeout_s": sec.ready_probe_timeout_s,
                             "request_limit": plan.limits.get(e), "request_limit_set_by": plan.limit_what.get(e),
                             "reads_log": logs.plan(eng, la.env), "caveats": eng.load_caveats(plan.shape)})  # fmt: skip
        except UsageError as err:
            commands.append({"engine": e, "error": str(err)})
    s = plan.shape
    return {
        "model": plan.model,
        "engines": plan.engines,
        "npl": plan.npl,
        "repeat": plan.repeat,
        "order": [f"r{r}:{e}" for r, e in plan.order],
        "shape": {k: getattr(s, k) for k in ("ptok", "gen", "parallel", "ctx", "batch", "ubatch", "port", "prompt", "min_requests")},
        # the rounds of N requests each point runs (parity.serving.rounds)
        "rounds": {n: rounds.count(n, s.min_requests) for n in plan.npl} if plan.workload is None else None,
        "parallel_sized": plan.sized,
        "warmup": {"requests": s.warmup.requests, "gen": s.warmup.gen},
        "commands": commands,
        "preflight": preflight(runner, lock),
        "lock_dir": str(lock_effective_dir(lock)),
        "port_free": all(port_free(p) for p in at),
        "ports": at,
        **({"crossover": {"gpus": gpus, "line": crossover.plan_line(plan.engines, gpus, shares),
                          "placement": [{"block": k, **crossover.placement(plan.engines, gpus, k)}
                                        for k in range(plan.repeat)],
                          "cpus": [{"gpu": g, **crossover.cores(p), "affinity": p} for g, p in shares.items()]}}
           if gpus else {}),
        "metrics": definitions(),
        "budget": plan.budget.describe() + ("" if not plan.budget.adaptive else "; the order above is the minimum, further blocks keep its rotation"),
        "calibration": calibration_plan(plan),
        **({"workload": plan.workload.describe()} if plan.workload is not None else {}),
    }


def server_ports(plan: SnapshotPlan) -> list[int]:
    """The servers' ports: serving.port, and in crossover the second engine's on port + 1."""
    if plan.gpus:
        return list(crossover.ports(plan.engines, plan.shape.port).values())
    return [plan.shape.port]


def calibration_plan(plan: SnapshotPlan) -> str:
    s, c = plan.shape, plan.calibrate
    if plan.workload is not None:
        return plan_text(plan)
    if c is None:
        return f"off ({plan.calibration_off}): gen {s.gen} as given"
    return f"block 0 runs at gen {s.gen}; if a point's window is under {s.min_window_s * c.margin:g} s (min_window_s {s.min_window_s:g} x {c.margin:g}) gen is raised for every engine and N (at most {c.max_gen} and what each engine's context allows) and block 0 becomes the trial"


def write_summary(plan: SnapshotPlan, run: Run, arms: list[dict], gated: dict | None = None) -> dict:
    rows = [r for a in arms for r in a["rows"]]
    if plan.calibration is not None:
        note_outran(plan, run.out, rows)
    extra = {"arms": [{k: v for k, v in a.items() if k not in ("rows", "outputs")} for a in arms], **run_notes(plan), **({"binary_gates": gated} if gated else {})}
    if plan.gpus:  # crossover: which GPU each engine ran on, per block as run (the trial block too)
        extra["placement"] = plan.placement
    outputs = {a["engine"]: a["outputs"] for a in [*plan.trial_arms, *arms] if a.get("outputs")}  # the probe ran in the engine's first arm
    if len(outputs) > 1:
        extra["output_parity"] = GATES["output_parity"].measure(outputs, plan.reference or plan.engines[0], plan.shape.output_parity)
    extra.update(logs.facts(plan.bound, run.dir.path, arms))  # the servers' logs: banner, kernel paths, traces
    if plan.workload is None:  # efficiency hook: % of roofline and memory per engine (parity.efficiency)

        extra["efficiency"] = for_snapshot(plan, run.dir, rows, arms)
        st = plan.stats
        extra["ttft"] = ttft_summary.section(rows, plan.reference, st.min_delta_pct, st.confidence)  # parity.ttft
    writer = summary if plan.workload is None else workload_summary  # workload hook: its metrics, same machinery
    doc = writer.write(plan, run.dir, rows, extra)
    if not doc["valid"]:
        run.dir.mark_invalid(f"{len(doc['invalid_points'])} invalid point(s): {doc['invalid_points'][0]}")
    for red in red_in_summary(doc):  # gates measured in the snapshot (output parity, banner): red marks it invalid
        run.dir.mark_invalid(f"{red.check}: {red.detail}")
    return doc


def note_outran(plan: SnapshotPlan, out, rows: list[PointRow]) -> None:
    """Calibrated windows that still fell short: recorded (calibration.outran) and said, with
    how much faster than the trial they ran (parity.stats.calibrate.outran)."""

    if plan.calibration.get("capped"):
        return  # the cap's warning said its windows may stay short
    windows = WINDOWS
    if plan.workload is not None:
        windows = plan.workload.kind_obj.windows
    trial = [r for a in plan.trial_arms for r in a["rows"]] or [r for r in rows if r.repeat == 0]
    items = outran(plan.calibration, trial, rows, plan.shape.min_window_s, windows)
    if items:
        plan.calibration["outran"] = items
        out.warn(outran_line(items, plan.calibration["margin"], plan.shape.min_window_s))


def run_notes(plan: SnapshotPlan) -> dict:
    """What summary.json records beside the rows: the stop rule and the calibration."""
    out = {}
    if plan.stop is not None:
        out["stop"] = plan.stop
    if plan.canary is not None:
        out["canary"] = plan.canary
    if plan.calibration is not None:
        out["calibration"] = plan.calibration
        if plan.trial_arms:
            out["calibration"] = {**plan.calibration, "trial_arms": [{k: v for k, v in a.items() if k != "outputs"} for a in plan.trial_arms]}
    return out


def sweep_all(plan: SnapshotPlan, run: Run) -> list[dict]:
    """Run the blocks: the fixed number, or until the stop rule (--until-ci) ends it; the
    first block doubles as the calibration trial.  A partial summary after every arm."""

    arms: list[dict] = []
    writer = summary if plan.workload is None else workload_summary
    budget = plan.budget
    st = plan.stats

    def partial(blocks: int) -> None:  # partial results survive a later failure or Ctrl-C
        plan.stop = {"rule": None, "why": f"running: {blocks} measured block(s) complete", "blocks": blocks, "budget": budget.describe()}
        writer.write(plan, run.dir, [r for a in arms for r in a["rows"]], {"partial": True, **run_notes(plan)})

    with run.out.progress(transient=False) as prog:
        task = prog.add_task("snapshot", total=len(plan.order) * len(plan.npl), status="")
        if plan.shape.order == "aabb":  # no blocks: the fixed order as planned
            for rep, engine in plan.order:
                arms.append(run_arm(run, plan, engine, rep, prog, task))
                partial(0)
            plan.stop = {"rule": "fixed", "why": f"{plan.repeat} repeats as asked (aabb)", "blocks": plan.repeat, "budget": budget.describe()}
            return arms
        counted = [0]
        ttft_note: list = [None]
        probes: list[dict] = []  # the drift canary's samples (parity.stats.canary)

        def run_block(b: int) -> bool:
            for engine in block_order(plan.engines, b, plan.shape.order):
                if (b, engine) not in plan.order:
                    plan.order.append((b, engine))
                    prog.update(task, total=len(plan.order) * len(plan.npl))
                if st.canary != "off":
                    probes.append(canary.sample(b, engine))
                if not plan.gpus:
                    arms.append(run_arm(run, plan, engine, b, prog, task))
                    partial(counted[0])
            if plan.gpus:  # crossover: both arms at once, each on its GPU
                arms.extend(crossover.run_block(run, plan, b, run_arm, prog, task))
                partial(counted[0])
            if st.canary == "discard":
                canary.discard(arms, b, canary.assess(probes))
            if b == 0 and plan.calibrate is not None:
                return calibrate_after_trial(plan, run.out, arms)
            return True

        def widths() -> dict:  # a workload's are its kind's headline metrics per point (its summary pairs the same)
            rows = [r for a in arms for r in a["rows"]]
            if plan.workload is None:
                return half_widths(rows, plan.reference, st.metrics, st.min_delta_pct, st.confidence, direction)
            kind = plan.workload.kind_obj
            heads = half_widths(rows, plan.reference, list(kind.headline), st.min_delta_pct, st.confidence, direction,
                                key="point")
            if budget.adaptive:  # the named ones: a kind's own (--until-ci request_ttft_median=2), its headline's
                both = {**kind.stop_widths(rows, plan.reference, st.min_delta_pct, st.confidence), **heads}
                return {k: v for k, v in both.items() if k.rsplit(" ", 1)[-1] in budget.targets}
            return heads

        def report(block, n, hw, decision) -> None:
            counted[0] = n
            run.out.info(block_line(block, n, hw, decision, budget))
            note = ttft_summary.open_note([r for a in arms for r in a["rows"]], plan.reference, budget.last_open)
            if note and (decision is None or decision[0] in (MAX_REPEATS, TIME_BUDGET)):  # the part keeping TTFT open
                ttft_note[0] = note
                run.out.info(f"  TTFT still open: {note}")

        rule, why, blocks, seconds = run_blocks(budget, run_block, widths, report)
        if probes:
            plan.canary = {**canary.assess(probes), "policy": st.canary}
            run.out.info(canary.line(plan.canary))
    plan.order = [(a["repeat"], a["engine"]) for a in [*plan.trial_arms, *arms]]  # as run
    plan.repeat = blocks
    plan.stop = {"rule": rule, "why": why, "blocks": blocks, "measured_s": round(seconds, 1), "budget": budget.describe()}
    if ttft_note[0] and rule in (MAX_REPEATS, TIME_BUDGET):  # the stop line names the part of TTFT that kept it going
        plan.stop["ttft_open"] = ttft_note[0]
        plan.stop["why"] += f"; TTFT kept going by: {ttft_note[0]}"
    return arms


def calibrate_after_trial(plan: SnapshotPlan, out, arms: list[dict]) -> bool:
    """After block 0: choose gen (or a built-in workload's field) from its windows
    (parity.stats.calibrate).  True: block 0 reached the target and counts; False: it was
    raised, block 0 was the trial (its arms move to plan.trial_arms) and the measured blocks
    follow at the new value."""
    rows = [r for a in arms for r in a["rows"]]
    if plan.workload is not None:  # a built-in's field instead of gen (parity.workloads.calibration)

        cal = choose_for(plan, rows)
        plan.calibration = {**cal.to_dict(), "workload": plan.workload.name}
    else:
        cal = choose_gen(plan, rows)
        plan.calibration = cal.to_dict()
    out.info(cal.line())
    if (b := cal.burst_note()) is not None:
        out.warn(b)
    if (w := cal.warning()) is not None:
        out.warn(w)
    if cal.kept_trial:
        return True
    if plan.workload is not None:
        plan.workload = with_value(plan.workload, cal.gen)
    else:
        plan.shape = replace(plan.shape, gen=cal.gen)
    plan.trial_arms = list(arms)
    arms.clear()
    return False


def choose_gen(plan: SnapshotPlan, rows: list[PointRow]):
    """The sweep's Calibration of gen, capped by each engine's request context less the prompt it sent."""

    s, c = plan.shape, plan.calibrate
    caps = {}
    for e in plan.engines:
        limit = plan.limits.get(e)
        if limit:
            sent = [p / r.n for r in rows if r.engine == e and (p := r.metric("prompt_tok_total")) and r.n]
            ptok = max([s.ptok, *sent]) if s.prompt == "tokens" else max(sent, default=s.ptok)
            caps[e] = (int(limit - ptok), f"engine {e}'s {limit}-token request context ({plan.limit_what.get(e)}) less {int(ptok)} prompt tokens")
    return choose(rows, s.gen, s.min_window_s, c.margin, caps, c.max_gen)


STEP_OPTIONS = {"npl", "engines", "model", "repeat", "ptok", "gen", "parallel", "ctx", "order", "gates", "allow_env", "workload", "trace",
                "until_ci", "max_repeats", "budget_s", "gpus"}


def step_plan(profile, options: dict) -> tuple[SnapshotRequest, SnapshotPlan]:
    """A snapshot step's options, checked as `parity snapshot` checks its flags (the campaign's
    dry run and its real run both call this before any step runs)."""
    check_step_options("snapshot", options, STEP_OPTIONS)
    options = {"gates": False, **options}  # campaigns usually run gate steps around it
    options["gates"] = bool(options["gates"])
    req = SnapshotRequest(**options)
    plan = make_plan(profile, req)
    check_env(plan, profile.policy, req.allow_env)
    return req, plan


def campaign_step(ctx, options: dict) -> dict:
    """kind: snapshot -- options {npl, engines, model, repeat, ptok, gen, parallel, ctx, order, gates, allow_env, workload, trace, until_ci, max_repeats, budget_s, gpus}
    (workload: a serving.workloads name, or a mapping declaring one inline: {name, kind, ...})."""

    req, plan = step_plan(ctx.profile, options)
    if plan.gpus:
        crossover.refuse(ctx.runner, plan)
    spec = gate_spec(ctx.profile, req.gates)
    arms = session.measured(ctx, plan.engines, lambda run: sweep_all(plan, run), gates=spec, serve=plan.model,
                            gpus=crossover.used(plan.gpus))
    doc = write_summary(plan, ctx.as_run(), arms, binary_gates(gate_inputs(ctx.profile), plan.engines, spec))

    for line in lines(doc.get("efficiency")):
        ctx.out.info(line)
    return {"medians": doc["medians"], "ratios": doc["ratios"], "headline": doc["headline"], "valid": doc["valid"], "efficiency": doc.get("efficiency"), **{k: doc[k] for k in ("stop", "calibration") if k in doc}}
