"""Same-session serving snapshot: every engine over every N, repeats in ABAB (or ABBA,
AABB) order, gated and locked, with the users' metrics and validity rules.

Order of work, as the users' harness does it and better: check the plan (shapes
against the context each engine will really give a request) before anything
starts; build engines before the GPU lock; take the lock; hardware.txt; pre-gates;
per (repeat, engine) an arm (parity.serving.sweep: server, warmup, every N, stop,
memory back); post-gates; summary.json / parity_summary.tsv / summary.tsv
(parity.serving.summary)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from parity.config import positive_int
from parity.errors import UsageError


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
    workload: str | dict | None = None  # serving.workloads.NAME (or a campaign's inline mapping)


def make_plan(ctx, req: SnapshotRequest) -> SnapshotPlan:
    """The sweep to run, checked: every problem here is a one-line UsageError (exit 2)
    before the lock is taken or any server starts."""
    from parity.serving.engines import adapter

    s = ctx.profile.serving
    over = {k: getattr(req, k) for k in ("ptok", "gen", "parallel", "ctx", "order") if getattr(req, k) is not None}
    # here, not in the CLI: campaign steps come through this function too
    for key in ("repeat", "ptok", "gen", "parallel", "ctx"):
        v = getattr(req, key)
        if v is not None and not positive_int(v):
            raise UsageError(f"--{key} must be positive")
    npl, engines = req.npl, req.engines
    if npl is not None and not (npl and all(map(positive_int, npl))):
        raise UsageError(f"--npl: expected positive integers, got {npl!r}")
    if over.get("order", "abab") not in ("abab", "abba", "aabb"):
        raise UsageError(f"--order must be abab, abba or aabb, got {over['order']!r}")
    if npl:
        over["npl"] = npl
    s = replace(s, **over)
    workload = None
    if req.workload is not None:  # workload hook: parity.serving.workloads
        from parity.serving.workloads import resolve

        workload = resolve(ctx, req.workload, s, npl=req.npl)
    engines = engines or s.engines
    if not engines:
        raise UsageError(f"profile {ctx.profile.name}: no serving engines (serving.engines or --engines)")
    if len(set(engines)) != len(engines):
        raise UsageError(f"--engines: an engine is listed twice ({', '.join(engines)}); use --repeat for repeats")
    for e in engines:
        ctx.profile.engine(e)
    if workload is None and s.parallel < max(s.npl) and any(ctx.profile.engine(e).kind == "llama" for e in engines):
        raise UsageError(f"N={max(s.npl)} exceeds --parallel {s.parallel}: llama-server would queue requests; raise --parallel")
    model = req.model or s.model
    if not model:
        raise UsageError("no model to serve (serving.model or --model)")
    repeat = req.repeat or s.repeat
    ref = s.reference_engine if s.reference_engine in engines else (engines[-1] if len(engines) > 1 else None)
    plan = SnapshotPlan(model, list(engines), ref, list(s.npl), repeat, s, run_order(list(engines), repeat, s.order))
    for e in engines:
        plan.limits[e], plan.limit_what[e] = adapter(ctx, e).context_need(ctx, e, s, existing_model(ctx, e, model))
        if workload is None:  # a workload checks its own shapes (attach, below)
            check_shape(plan, e, s.ptok, s.gen, "the sweep")
        if s.warmup.requests:
            check_shape(plan, e, s.ptok, s.warmup.gen, "the warmup")
    if workload is not None:
        from parity.serving.workloads import attach

        attach(ctx, plan, workload)
    return plan


def existing_model(ctx, engine: str, model: str) -> str | None:
    """The engine's model file when it is already there (plan time never synthesizes)."""
    import os

    m = ctx.profile.models.get(model)
    path = m.path if m and ctx.profile.engine(engine).kind == "llama" else None
    return path if path and os.path.isfile(path) else None


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
    out = []
    for r in range(repeat):
        k = r % len(engines) if order == "abba" and engines else 0
        out += [(r, e) for e in engines[k:] + engines[:k]]
    return out


def snapshot(ctx, req: SnapshotRequest) -> dict:
    """`parity snapshot`: the dry-run plan, or a run directory with the gated sweep's summary."""
    from parity.context import run_session

    plan = make_plan(ctx, req)
    if req.dry_run:
        from parity.gpu.gonogo import command_paths, dry_run_session, go_no_go

        check_env(ctx, plan, req.allow_env)
        doc = dry_run(ctx, plan)
        with dry_run_session(ctx, "snapshot", f"snapshot-{plan.model}") as rd:  # the users' DRY_RUN=1: a go/no-go with its evidence
            doc["go_no_go"] = go_no_go(ctx, paths=command_paths(ctx, doc["commands"]), ports=[plan.shape.port])
            doc["run_dir"] = str(rd.path)
            rd.write_json("plan.json", doc)
        return doc
    with run_session(ctx, "snapshot", f"snapshot-{plan.model}"):
        if not req.gates:
            ctx.run.mark_invalid("ungated: --no-gates")
        doc = run_snapshot(ctx, plan, gates=req.gates, allow_env=req.allow_env)
        return {"run_dir": str(ctx.run.path), **doc}


def check_env(ctx, plan: SnapshotPlan, allow_env) -> None:
    from parity.serving.engines import adapter
    from parity.serving.envpolicy import check_bench_env

    for e in plan.engines:
        env = adapter(ctx, e).env(ctx, e)
        check_bench_env(env, ctx.profile.policy, allow_env, context=f"benchmark (engine {e})")


def dry_run(ctx, plan: SnapshotPlan) -> dict:
    from parity.gpu.lock import effective_dir as lock_effective_dir
    from parity.gpu.lock import preflight
    from parity.serving.engines import adapter, model_for
    from parity.serving.metrics import definitions
    from parity.serving.server import port_free

    commands = []
    for e in plan.engines:
        try:
            mf, model_error = model_for(ctx, e, plan.model, dry=True), None
        except UsageError as err:  # still show the command, with a placeholder for the file
            mf, model_error = f"<{err}>", str(err)
        try:
            la = adapter(ctx, e).launch(ctx, e, mf, plan.shape.port, plan.shape, dry=True, model=plan.model)
            eng = ctx.profile.engine(e)
            commands.append({"engine": e, "argv": la.argv, "env": la.env, "unset": la.unset, "ready": f"http://127.0.0.1:{plan.shape.port}{la.ready_path}",
                             "served_name": None if model_error else la.served_name, "model_error": model_error,
                             "ready_timeout_s": eng.ready_timeout_s, "ready_probe_timeout_s": eng.ready_probe_timeout_s,
                             "request_limit": plan.limits.get(e), "request_limit_set_by": plan.limit_what.get(e)})  # fmt: skip
        except UsageError as err:
            commands.append({"engine": e, "error": str(err)})
    s = plan.shape
    return {
        "model": plan.model,
        "engines": plan.engines,
        "npl": plan.npl,
        "repeat": plan.repeat,
        "order": [f"r{r}:{e}" for r, e in plan.order],
        "shape": {k: getattr(s, k) for k in ("ptok", "gen", "parallel", "ctx", "batch", "ubatch", "port", "prompt")},
        "warmup": {"requests": s.warmup.requests, "gen": s.warmup.gen},
        "commands": commands,
        "preflight": preflight(ctx.runner, ctx.profile.lock),
        "lock_dir": str(lock_effective_dir(ctx.profile.lock)),
        "port_free": port_free(s.port),
        "metrics": definitions(),
        **({"workload": plan.workload.describe()} if plan.workload is not None else {}),
    }


def run_snapshot(ctx, plan: SnapshotPlan, gates: bool = True, allow_env=()) -> dict:
    from parity.engine.build import ensure_engines_built, write_builds_json
    from parity.gates.prepost import gate_engines, gated
    from parity.gpu.hardware import write_hardware
    from parity.gpu.lock import held_lock

    check_env(ctx, plan, allow_env)
    ensure_engines_built(ctx, [*plan.engines, *(gate_engines(ctx) if gates else [])])  # every build before the shared GPU is taken
    with held_lock(ctx):
        write_hardware(ctx)  # before any server starts (Phase 24)
        write_builds_json(ctx, plan.engines)  # vLLM from the cached CPU venv too
        with gated(ctx, enabled=gates):
            arms = sweep_all(ctx, plan)
    return write_summary(ctx, plan, arms)


def write_summary(ctx, plan: SnapshotPlan, arms: list[dict]) -> dict:
    from parity.serving import summary, workload_summary

    rows = [r for a in arms for r in a["rows"]]
    extra = {"arms": [{k: v for k, v in a.items() if k not in ("rows", "outputs")} for a in arms]}
    outputs = {a["engine"]: a["outputs"] for a in arms if a.get("outputs")}
    if len(outputs) > 1:
        from parity.serving.output_parity import compare_engines

        op = plan.shape.output_parity
        extra["output_parity"] = compare_engines(outputs, plan.reference or plan.engines[0], op.min_agreement, op.max_kl)
    if plan.workload is None:  # efficiency hook: % of roofline and memory per engine (parity.efficiency)
        from parity.efficiency.roofline import for_snapshot

        extra["efficiency"] = for_snapshot(ctx, plan, rows, arms)
    writer = summary if plan.workload is None else workload_summary  # workload hook: its metrics, same machinery
    doc = writer.write(ctx, plan, rows, extra)
    if not doc["valid"]:
        ctx.run.mark_invalid(f"{len(doc['invalid_points'])} invalid point(s): {doc['invalid_points'][0]}")
    if doc.get("output_parity", {}).get("status") == "fail":
        ctx.run.mark_invalid(f"cross-engine output parity: {doc['output_parity']['failures'][0]}")
    return doc


def sweep_all(ctx, plan: SnapshotPlan) -> list[dict]:
    from parity.serving import summary, workload_summary
    from parity.serving.sweep import run_arm

    arms: list[dict] = []
    with ctx.out.progress(transient=False) as prog:
        task = prog.add_task("snapshot", total=len(plan.order) * len(plan.npl), status="")
        for rep, engine in plan.order:
            arms.append(run_arm(ctx, plan, engine, rep, prog, task))
            (summary if plan.workload is None else workload_summary).write(ctx, plan, [r for a in arms for r in a["rows"]], {"partial": True})  # partial results survive a later failure
    return arms


def campaign_step(ctx, options: dict) -> dict:
    """kind: snapshot -- options {npl, engines, model, repeat, ptok, gen, parallel, ctx, order, gates, allow_env, workload}
    (workload: a serving.workloads name, or a mapping declaring one inline: {name, kind, ...})."""
    from parity.campaign import check_step_options

    check_step_options("snapshot", options, {"npl", "engines", "model", "repeat", "ptok", "gen", "parallel", "ctx", "order", "gates", "allow_env", "workload"})
    options = {"gates": False, **options}  # campaigns usually run gate steps around it
    options["gates"] = bool(options["gates"])
    req = SnapshotRequest(**options)
    doc = run_snapshot(ctx, make_plan(ctx, req), gates=req.gates, allow_env=req.allow_env)
    from parity.efficiency.roofline import lines

    for line in lines(doc.get("efficiency")):
        ctx.out.info(line)
    return {"medians": doc["medians"], "ratios": doc["ratios"], "headline": doc["headline"], "valid": doc["valid"], "efficiency": doc.get("efficiency")}
