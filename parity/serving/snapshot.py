"""Same-session serving snapshot: every engine over every N, repeats in ABAB (or ABBA,
AABB) order, gated and locked, with the users' metrics and validity rules.

Order of work, as the users' harness does it and better: check the plan (shapes
against the context each engine will really give a request) before anything
starts; build engines before the GPU lock; take the lock; hardware.txt; pre-gates;
per (repeat, engine) an arm (parity.serving.sweep: server, warmup, every N, stop,
memory back); post-gates; summary.json / parity_summary.tsv / summary.tsv
(parity.serving.summary)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from parity.decode import replace
from parity import session
from parity.options import parse_until_ci
from parity.stats.adaptive import MAX_REPEATS, TIME_BUDGET, Budget
from parity.stats import canary
from parity.engines import kind_of
from parity.errors import UsageError
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
from parity.gonogo import command_paths, dry_run_session, go_no_go, not_answering
from parity.gpu.lock import effective_dir as lock_effective_dir, preflight
from parity.metrics.registry import definitions, direction
from parity.options import check_step_options
from parity.serving import logs, summary, workload_summary
from parity.serving.efficiency import for_snapshot
from parity.serving.slots import size_for_npl
from parity.serving import rounds
from parity.serving.sweep import run_arm
from parity.serving.workloads import attach, resolve
from parity.stats.blocks import block_line, block_order, half_widths, run_blocks
from parity.stats.calibrate import WINDOWS, choose, outran, outran_line
from parity.ttft import summary as ttft_summary
from parity.workloads.calibration import choose_for, plan_text, why_off, with_value
from parity.workloads.defaults import parse_options


@dataclass
class SnapshotPlan:
    model: str
    engines: list[str]
    reference: str | None
    npl: list[int]
    repeat: int
    shape: object  # ServingConfig with overrides
    order: list[tuple[int, str]]  # (repeat, engine) in execution order
    limits: dict[str, int] = field(default_factory=dict)  # engine -> tokens one request may use (prompt + generated)
    limit_what: dict[str, str] = field(default_factory=dict)  # engine -> what sets that limit, in words
    workload: object | None = None  # parity.serving.workloads.Workload: its points replace the N sweep
    budget: object | None = None  # parity.stats.adaptive.Budget: how many blocks (fixed, or --until-ci)
    calibrate: object | None = None  # serving.calibrate when the trial block may raise gen (None: gen as given)
    calibration_off: str | None = None  # why the trial block may not raise gen (or a workload's field); None: it may
    calibration: dict | None = None  # what the calibration chose, with its evidence (summary.json "calibration")
    trial_arms: list = field(default_factory=list)  # the calibration trial's arms when it did not count
    stop: dict | None = None  # which stop rule ended the sweep (summary.json "stop")
    canary: dict | None = None  # the drift canary's samples and flagged blocks (summary.json "canary")
    sized: str | None = None  # --parallel raised to the largest N (parity.serving.slots), in words


@dataclass
class SnapshotRequest:
    """What `parity snapshot` (or a campaign's snapshot step) asks for; None keeps the profile's value."""

    npl: list[int] | None = None
    engines: list[str] | None = None
    model: str | None = None
    repeat: int | None = None
    ptok: int | None = None
    gen: int | None = None
    parallel: int | None = None
    ctx: int | None = None
    order: str | None = None
    gates: bool = True
    allow_env: list[str] = field(default_factory=list)
    dry_run: bool = False
    workload: str | dict | None = None  # a built-in kind or serving.workloads.NAME (or a campaign's inline mapping)
    workload_opts: list[str] = field(default_factory=list)  # --workload-opt KEY=VALUE
    until_ci: float | str | None = None  # adaptive repeats: PCT or METRIC=PCT,... (None: stats.until_ci_pct / until_ci_targets)
    max_repeats: int | None = None  # None: stats.max_repeats
    budget_s: float | None = None  # None: stats.budget_s


def make_plan(ctx, req: SnapshotRequest) -> SnapshotPlan:
    """The sweep to run, checked: every problem here is a one-line UsageError (exit 2)
    before the lock is taken or any server starts."""
    s = ctx.profile.serving
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
    workload = None
    if req.workload is not None:  # workload hook: parity.serving.workloads

        workload = resolve(ctx, req.workload, s, npl=req.npl, options=parse_options(req.workload_opts))
    engines = engines or s.engines
    if not engines:
        raise UsageError(f"profile {ctx.profile.name}: no serving engines (serving.engines or --engines)")
    if len(set(engines)) != len(engines):
        raise UsageError(f"--engines: an engine is listed twice ({', '.join(engines)}); use --repeat for repeats")
    for e in engines:
        ctx.profile.engine(e)
    sized = None
    if workload is None:  # a workload checks its own concurrency (attach, below)
        s, sized = size_for_npl(ctx.profile, list(engines), s, req.parallel is not None)
    model = req.model or s.model
    if not model:
        raise UsageError("no model to serve (serving.model or --model)")
    if model not in ctx.profile.models and not Path(model).expanduser().exists() and any(kind_of(ctx.profile, e).model_source for e in engines):
        raise UsageError(f"--model {model!r}: neither a model of profile {ctx.profile.name} ({', '.join(ctx.profile.models) or 'none'}) nor a file")
    repeat = req.repeat or s.repeat
    ref = s.reference_engine if s.reference_engine in engines else (engines[-1] if len(engines) > 1 else None)
    order = run_order(list(engines), repeat, s.order)
    plan = SnapshotPlan(model, list(engines), ref, list(s.npl), repeat, s, order, sized=sized)
    plan.budget = make_budget(ctx, req, plan, workload)
    if workload is not None:  # a built-in's sized field (parity.workloads.calibration)

        plan.calibration_off = why_off(s, workload, req.gen is not None)
    else:  # an explicit --gen (or a step's gen) is respected exactly
        plan.calibration_off = calibration_off(s, req.gen is not None)
    plan.calibrate = s.calibrate if plan.calibration_off is None else None
    for e in engines:
        need = kind_of(ctx.profile, e).context_need(ctx.profile, e, s, kind_of(ctx.profile, e).local_model_file(ctx.profile, e, model))
        if need.tokens is not None:
            plan.limits[e], plan.limit_what[e] = need.tokens, need.what
        if workload is None:  # a workload checks its own shapes (attach, below)
            check_shape(plan, e, s.ptok, s.gen, "the sweep")
        if s.warmup.requests:
            check_shape(plan, e, s.ptok, s.warmup.gen, "the warmup")
    if workload is not None:
        attach(ctx, plan, workload)
    return plan


def make_budget(ctx, req: SnapshotRequest, plan: SnapshotPlan, workload):
    """The stop rule's budget: fixed (repeat blocks) or --until-ci's (at least repeat and
    2 blocks, at most --max-repeats, within --budget-s).  Bad values: one-line UsageError."""
    st = ctx.profile.stats
    check_options(until_ci=req.until_ci, max_repeats=req.max_repeats, budget_s=req.budget_s)
    # --until-ci PCT or METRIC=PCT,... replaces the profile's stats.until_ci_pct and until_ci_targets
    pct, targets = parse_until_ci(req.until_ci) if req.until_ci is not None else (st.until_ci_pct, dict(st.until_ci_targets))
    unknown = sorted(set(targets) - set(st.metrics))
    if unknown:
        raise UsageError(f"--until-ci: {unknown[0]} is not a headline metric the stop rule watches (stats.metrics: {', '.join(st.metrics)})")
    if pct is None and not targets:
        if req.max_repeats is not None or req.budget_s is not None:
            raise UsageError(f"{'--max-repeats' if req.max_repeats is not None else '--budget-s'} bounds adaptive repeats: give --until-ci PCT too (or --repeat N for a fixed count)")
        return Budget(until_ci_pct=None, min_blocks=plan.repeat, max_blocks=plan.repeat)
    if workload is not None:
        raise UsageError("--until-ci stops on the N sweep's headline intervals; a workload has its own points (run it with --repeat N)")
    if plan.reference is None or len(plan.engines) < 2:
        raise UsageError("--until-ci needs two engines: its intervals are paired ratios against the reference engine")
    if plan.shape.order == "aabb":
        raise UsageError("--until-ci adds blocks (every engine once, back to back); --order aabb has none: use abab or abba")
    lo = max(plan.repeat, 2)
    hi = req.max_repeats if req.max_repeats is not None else st.max_repeats
    if hi < lo:
        raise UsageError(f"--max-repeats {hi} is below the minimum of {lo} blocks (--repeat/serving.repeat {plan.repeat}, and an interval needs 2)")
    return Budget(until_ci_pct=None if pct is None else float(pct), min_blocks=lo, max_blocks=hi, max_seconds=req.budget_s if req.budget_s is not None else st.budget_s, targets=targets)


def served_model_problem(ctx, engine: str, model: str) -> str | None:
    """Why the engine's model cannot be served yet (a dry run shows it; the real run stops), None: fine."""
    try:
        session.check_served_model(ctx, engine, model)
    except UsageError as e:
        return str(e)
    return None


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

    plan = make_plan(ctx, req)
    check_env(ctx, plan, req.allow_env)  # the forbidden bench knobs: refused before the run dir, dry run or not
    if req.dry_run:
        doc = dry_run(ctx, plan)
        with dry_run_session(ctx, "snapshot", f"snapshot-{plan.model}") as rd:  # the users' DRY_RUN=1: a go/no-go with its evidence
            doc["go_no_go"] = go_no_go(ctx, paths=command_paths(ctx, doc["commands"]), ports=[plan.shape.port], more=not_answering(doc["commands"]))
            doc["run_dir"] = str(rd.path)
            rd.write_json("plan.json", doc)
        return doc
    session.refuse_missing_programs(ctx, plan.engines)  # the dry run's NO GO for a missing program, refused before the run dir
    if plan.sized:
        ctx.out.info(plan.sized)
    with run_session(ctx, "snapshot", f"snapshot-{plan.model}"):
        if not req.gates:
            ctx.run.mark_invalid("ungated: --no-gates")
        doc = run_snapshot(ctx, plan, gates=req.gates, allow_env=req.allow_env)
        return {"run_dir": str(ctx.run.path), **doc}


def check_env(ctx, plan: SnapshotPlan, allow_env) -> None:
    for e in plan.engines:
        env = kind_of(ctx.profile, e).env(ctx.profile, e)
        check_bench_env(env, ctx.profile.policy, allow_env, context=f"benchmark (engine {e})")


def dry_run(ctx, plan: SnapshotPlan) -> dict:
    commands = []
    for e in plan.engines:
        kind = kind_of(ctx.profile, e)
        mf, model_error = kind.model_file(ctx.profile, e, plan.model), served_model_problem(ctx, e, plan.model)
        try:
            la = kind.launch(ctx.profile, e, mf, plan.shape.port, plan.shape, dry=True, model=plan.model, out=ctx.out)
            eng = ctx.profile.engine(e)
            commands.append({"engine": e, "argv": la.argv, "env": la.env, "unset": la.unset, "ready": f"http://{la.host}:{la.port}{la.ready_path}",
                             "start": la.start, "stop": la.stop, "spawned": la.spawned, **({} if la.spawned else {"answering": answering(la, eng.ready_probe_timeout_s)}),
                             "served_name": None if model_error else la.served_name, "model_error": model_error,
                             "ready_timeout_s": eng.ready_timeout_s, "ready_probe_timeout_s": eng.ready_probe_timeout_s,
                             "request_limit": plan.limits.get(e), "request_limit_set_by": plan.limit_what.get(e),
                             "reads_log": logs.plan(ctx.profile, e, la.env)})  # fmt: skip
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
        "preflight": preflight(ctx.runner, ctx.profile.lock),
        "lock_dir": str(lock_effective_dir(ctx.profile.lock)),
        "port_free": port_free(s.port),
        "metrics": definitions(),
        "budget": plan.budget.describe() + ("" if not plan.budget.adaptive else "; the order above is the minimum, further blocks keep its rotation"),
        "calibration": calibration_plan(plan),
        **({"workload": plan.workload.describe()} if plan.workload is not None else {}),
    }


def calibration_plan(plan: SnapshotPlan) -> str:
    s, c = plan.shape, plan.calibrate
    if plan.workload is not None:
        return plan_text(plan)
    if c is None:
        return f"off ({plan.calibration_off}): gen {s.gen} as given"
    return f"block 0 runs at gen {s.gen}; if a point's window is under {s.min_window_s * c.margin:g} s (min_window_s {s.min_window_s:g} x {c.margin:g}) gen is raised for every engine and N (at most {c.max_gen} and what each engine's context allows) and block 0 becomes the trial"


def run_snapshot(ctx, plan: SnapshotPlan, gates: bool = True, allow_env=()) -> dict:
    check_env(ctx, plan, allow_env)
    spec = GateSpec.from_profile(ctx.profile) if gates else None
    session.prepare(ctx, plan.engines, gates=spec)  # builds, installs, gate models: before the shared GPU is taken
    for e in plan.engines:
        session.serve_model(ctx, e, plan.model)
    with session.measuring(ctx, plan.engines, gates=spec):  # hardware.txt before any server starts, builds.json, pre/post gates
        arms = sweep_all(ctx, plan)
    return write_summary(ctx, plan, arms, binary_gates(ctx, plan.engines, spec))


def write_summary(ctx, plan: SnapshotPlan, arms: list[dict], gated: dict | None = None) -> dict:
    rows = [r for a in arms for r in a["rows"]]
    if plan.calibration is not None:
        note_outran(ctx, plan, rows)
    extra = {"arms": [{k: v for k, v in a.items() if k not in ("rows", "outputs")} for a in arms], **run_notes(plan), **({"binary_gates": gated} if gated else {})}
    outputs = {a["engine"]: a["outputs"] for a in [*plan.trial_arms, *arms] if a.get("outputs")}  # the probe ran in the engine's first arm
    if len(outputs) > 1:
        extra["output_parity"] = GATES["output_parity"].measure(outputs, plan.reference or plan.engines[0], plan.shape.output_parity)
    extra.update(logs.facts(ctx.profile, ctx.run.path, arms))  # the servers' logs: banner, kernel paths, traces
    if plan.workload is None:  # efficiency hook: % of roofline and memory per engine (parity.efficiency)

        extra["efficiency"] = for_snapshot(ctx, plan, rows, arms)
        st = ctx.profile.stats
        extra["ttft"] = ttft_summary.section(rows, plan.reference, st.min_delta_pct, st.confidence)  # parity.ttft
    writer = summary if plan.workload is None else workload_summary  # workload hook: its metrics, same machinery
    doc = writer.write(ctx, plan, rows, extra)
    if not doc["valid"]:
        ctx.run.mark_invalid(f"{len(doc['invalid_points'])} invalid point(s): {doc['invalid_points'][0]}")
    for red in red_in_summary(doc):  # gates measured in the snapshot (output parity, banner): red marks it invalid
        ctx.run.mark_invalid(f"{red.check}: {red.detail}")
    return doc


def note_outran(ctx, plan: SnapshotPlan, rows: list[dict]) -> None:
    """Calibrated windows that still fell short: recorded (calibration.outran) and said, with
    how much faster than the trial they ran (parity.stats.calibrate.outran)."""

    if plan.calibration.get("capped"):
        return  # the cap's warning said its windows may stay short
    windows = WINDOWS
    if plan.workload is not None:
        windows = plan.workload.kind_obj.windows
    trial = [r for a in plan.trial_arms for r in a["rows"]] or [r for r in rows if r.get("repeat") == 0]
    items = outran(plan.calibration, trial, rows, plan.shape.min_window_s, windows)
    if items:
        plan.calibration["outran"] = items
        ctx.out.warn(outran_line(items, plan.calibration["margin"], plan.shape.min_window_s))


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


def sweep_all(ctx, plan: SnapshotPlan) -> list[dict]:
    """Run the blocks: the fixed number, or until the stop rule (--until-ci) ends it; the
    first block doubles as the calibration trial.  A partial summary after every arm."""

    arms: list[dict] = []
    writer = summary if plan.workload is None else workload_summary
    budget = plan.budget
    st = ctx.profile.stats

    def partial(blocks: int) -> None:  # partial results survive a later failure or Ctrl-C
        plan.stop = {"rule": None, "why": f"running: {blocks} measured block(s) complete", "blocks": blocks, "budget": budget.describe()}
        writer.write(ctx, plan, [r for a in arms for r in a["rows"]], {"partial": True, **run_notes(plan)})

    with ctx.out.progress(transient=False) as prog:
        task = prog.add_task("snapshot", total=len(plan.order) * len(plan.npl), status="")
        if plan.shape.order == "aabb":  # no blocks: the fixed order as planned
            for rep, engine in plan.order:
                arms.append(run_arm(ctx, plan, engine, rep, prog, task))
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
                arms.append(run_arm(ctx, plan, engine, b, prog, task))
                partial(counted[0])
            if st.canary == "discard":
                canary.discard(arms, b, canary.assess(probes))
            if b == 0 and plan.calibrate is not None:
                return calibrate_after_trial(ctx, plan, arms)
            return True

        def widths() -> dict:
            return half_widths([r for a in arms for r in a["rows"]], plan.reference, st.metrics, st.min_delta_pct, st.confidence, direction) if plan.workload is None else {}

        def report(block, n, hw, decision) -> None:
            counted[0] = n
            ctx.out.info(block_line(block, n, hw, decision, budget))
            note = ttft_summary.open_note([r for a in arms for r in a["rows"]], plan.reference, budget.last_open)
            if note and (decision is None or decision[0] in (MAX_REPEATS, TIME_BUDGET)):  # the part keeping TTFT open
                ttft_note[0] = note
                ctx.out.info(f"  TTFT still open: {note}")

        rule, why, blocks, seconds = run_blocks(budget, run_block, widths, report)
        if probes:
            plan.canary = {**canary.assess(probes), "policy": st.canary}
            ctx.out.info(canary.line(plan.canary))
    plan.order = [(a["repeat"], a["engine"]) for a in [*plan.trial_arms, *arms]]  # as run
    plan.repeat = blocks
    plan.stop = {"rule": rule, "why": why, "blocks": blocks, "measured_s": round(seconds, 1), "budget": budget.describe()}
    if ttft_note[0] and rule in (MAX_REPEATS, TIME_BUDGET):  # the stop line names the part of TTFT that kept it going
        plan.stop["ttft_open"] = ttft_note[0]
        plan.stop["why"] += f"; TTFT kept going by: {ttft_note[0]}"
    return arms


def calibrate_after_trial(ctx, plan: SnapshotPlan, arms: list[dict]) -> bool:
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
    ctx.out.info(cal.line())
    if (b := cal.burst_note()) is not None:
        ctx.out.warn(b)
    if (w := cal.warning()) is not None:
        ctx.out.warn(w)
    if cal.kept_trial:
        return True
    if plan.workload is not None:
        plan.workload = with_value(plan.workload, cal.gen)
    else:
        plan.shape = replace(plan.shape, gen=cal.gen)
    plan.trial_arms = list(arms)
    arms.clear()
    return False


def choose_gen(plan: SnapshotPlan, rows: list[dict]):
    """The sweep's Calibration of gen, capped by each engine's request context less the prompt it sent."""

    s, c = plan.shape, plan.calibrate
    caps = {}
    for e in plan.engines:
        limit = plan.limits.get(e)
        if limit:
            sent = [r["prompt_tok_total"] / r["n"] for r in rows if r["engine"] == e and r.get("prompt_tok_total") and r.get("n")]
            ptok = max([s.ptok, *sent]) if s.prompt == "tokens" else max(sent, default=s.ptok)
            caps[e] = (int(limit - ptok), f"engine {e}'s {limit}-token request context ({plan.limit_what.get(e)}) less {int(ptok)} prompt tokens")
    return choose(rows, s.gen, s.min_window_s, c.margin, caps, c.max_gen)


STEP_OPTIONS = {"npl", "engines", "model", "repeat", "ptok", "gen", "parallel", "ctx", "order", "gates", "allow_env", "workload", "until_ci", "max_repeats", "budget_s"}


def check_step(ctx, options: dict) -> tuple[SnapshotRequest, SnapshotPlan]:
    """A snapshot step's options, checked as `parity snapshot` checks its flags (the campaign's
    dry run and its real run both call this before any step runs)."""
    check_step_options("snapshot", options, STEP_OPTIONS)
    options = {"gates": False, **options}  # campaigns usually run gate steps around it
    options["gates"] = bool(options["gates"])
    req = SnapshotRequest(**options)
    plan = make_plan(ctx, req)
    check_env(ctx, plan, req.allow_env)
    return req, plan


def campaign_step(ctx, options: dict) -> dict:
    """kind: snapshot -- options {npl, engines, model, repeat, ptok, gen, parallel, ctx, order, gates, allow_env, workload, until_ci, max_repeats, budget_s}
    (workload: a serving.workloads name, or a mapping declaring one inline: {name, kind, ...})."""

    req, plan = check_step(ctx, options)
    doc = run_snapshot(ctx, plan, gates=req.gates, allow_env=req.allow_env)

    for line in lines(doc.get("efficiency")):
        ctx.out.info(line)
    return {"medians": doc["medians"], "ratios": doc["ratios"], "headline": doc["headline"], "valid": doc["valid"], "efficiency": doc.get("efficiency"), **{k: doc[k] for k in ("stop", "calibration") if k in doc}}
