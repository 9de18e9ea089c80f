"""`parity bench` and the campaign's bench step: one llama-batched-bench run (parity.bench.batched_bench)
or blocks of runs with paired statistics (parity.bench.ab)."""

from __future__ import annotations

import os

from parity import session
from parity.bench.ab import ABPlan, plan_ab, run_ab
from parity.bench.batched_bench import SinglePlan, argv, default_engine, plan_single, run_bench
from parity.bench.request import BenchRequest
from parity.context import run_session
from parity.engines.bound import Engine, bind_all
from parity.context import dry_run_session
from parity.gonogo import go_no_go
from parity.gpu.lock import effective_dir
from parity.errors import UsageError
from parity.options import check_step_options
from parity.efficiency.roofline import lines
from parity.optime import measure as opmeasure, plan as opplan
from parity.optime.stats import tsv as ops_tsv
from parity.results import plain
from parity.stats import Rule


def bench(ctx, req: BenchRequest) -> dict:
    """`parity bench`: a run directory with bench.json (one run, or blocks: parity.bench.ab); with
    --dry-run the checked plan, its commands and the go / no-go.  The dry run and the real run
    check the same request the same way (plan_ab, plan_single, parity.optime.plan) before anything
    happens.  --ops: test-backend-ops perf of those ops on every arm in paired blocks (ops.json, ops.tsv)."""
    if req.ops is not None:
        p = opplan.plan(ctx.profile, ops_request(req))
        bound = bind_all(ctx.profile, p.engines)

        def tool(e: str, dry: bool) -> str:
            return bound[e].tool_path(opplan.TOOL, ctx.runner, ctx.out, dry=dry)

        if req.dry_run:
            bins = {e: tool(e, True) for e in p.engines}
            fmt = opmeasure.probe_output(ctx.runner, bins, p.envs) if all(map(os.path.isfile, bins.values())) else None
            doc = {"dry_run": True, **opplan.describe(p, bins, fmt), "lock": str(effective_dir(ctx.profile.lock))}
            with dry_run_session(ctx, "bench", f"bench-ops-{'-'.join(p.ops)}"[:60]) as rd:
                doc["go_no_go"] = go_no_go(ctx.as_run(), ctx.profile.lock, ctx.profile.hardware_class,
                                           paths={f"{opplan.TOOL} of {e}": b for e, b in bins.items()})
                doc["run_dir"] = str(rd.path)
                rd.write_json("plan.json", doc)
            return doc
        with run_session(ctx, "bench", "bench-ops"):
            session.prepare(ctx, p.engines)  # the builds, before the lock
            bins = {e: tool(e, False) for e in p.engines}
            output = opmeasure.probe_output(ctx.runner, bins, p.envs)
            rule = Rule.from_config(ctx.profile.stats)
            with session.measuring(ctx, p.engines):
                doc = opmeasure.measure(p, bins, output, ctx.runner, ctx.run, ctx.out.info, rule)
            ctx.run.write_json("ops.json", plain(doc))
            ctx.run.write_text("ops.tsv", ops_tsv(doc))
            if doc["problems"]:
                ctx.run.mark_invalid(f"{len(doc['problems'])} op timing problem(s), first: {doc['problems'][0]}")
            return plain({"run_dir": str(ctx.run.path), **doc})

    def dry(slug: str, doc: dict, paths: dict) -> dict:  # the go / no-go with its evidence in a dry-run run dir
        with dry_run_session(ctx, "bench", f"{slug}-{doc['model']}") as rd:
            doc["go_no_go"] = go_no_go(ctx.as_run(), ctx.profile.lock, ctx.profile.hardware_class, paths=paths)
            doc["run_dir"] = str(rd.path)
            rd.write_json("plan.json", doc)
        return doc

    if req.blocks():
        ab = req.ab_request()
        if not ab.engines:
            ab.engines = [e for e in [default_engine(ctx.profile)] if e]
        if not ab.engines:
            raise UsageError("no llama engine to bench (serving.engines or --engines)")
        p = plan_ab(ctx.profile, ab)
        if req.dry_run:
            blocks = {"arms": [a.name for a in p.arms], "reference": p.reference, "order": p.order,
                      "blocks": p.budget.describe()}
            engines = [p.bound[e] for e in p.engines]
            return dry("bench-ab", *dry_plan(ctx.profile, ctx.runner, ctx.out, blocks, engines, p, p.envs))
        with run_session(ctx, "bench", "bench-ab" if len(ab.engines) > 1 or ab.aa else "bench"):
            session.prepare(ctx, p.engines, [p.model])  # the builds and the model, before the lock
            doc = run_ab(ctx.as_run(), p, session.model_file(ctx.profile, p.model), session.measuring(ctx, p.engines))
            return {"run_dir": str(ctx.run.path), **doc}
    if req.engines:
        req.engine = req.engines[0]
    p = plan_single(ctx.profile, req.engine, req.model, req.npp, req.ntg, req.npl, req.allow_env)
    if req.dry_run:
        return dry("bench", *dry_plan(ctx.profile, ctx.runner, ctx.out, {}, [p.engine], p, {p.engine.name: p.env}))
    with run_session(ctx, "bench", "bench"):
        session.prepare(ctx, [p.engine.name], [p.model])  # the build and the model, before the lock
        model_file = session.model_file(ctx.profile, p.model)
        doc = run_bench(ctx.as_run(), p, model_file, session.measuring(ctx, [p.engine.name]))
        return {"run_dir": str(ctx.run.path), **doc}


def ops_request(req: BenchRequest) -> opplan.OpsRequest:
    """--ops: the op timing's request (UsageError for a batched-bench option beside it)."""
    if given := [f for f in ("npp", "ntg", "npl", "model") if getattr(req, f) is not None]:
        raise UsageError(f"--{given[0]} is llama-batched-bench's; --ops times test-backend-ops perf (no model)")
    engines = list(req.engines or ([req.engine] if req.engine else []))
    return opplan.OpsRequest(req.ops, engines, None, req.aa, req.ops_backend, req.ops_params, req.repeat, req.until_ci,
                             req.max_repeats, req.budget_s, req.order, list(req.allow_env or []))


def dry_plan(profile, runner, out, blocks: dict, engines: list[Engine], p: SinglePlan | ABPlan,
             envs: dict) -> tuple[dict, dict]:
    """What the real run of plan p would run (the llama-batched-bench command of each engine, its
    env) and the lock it would take; (that plan, the paths its go / no-go checks)."""
    model, npp, ntg, npl = p.model, p.npp, p.ntg, p.npl
    model_path = session.model_file_if_there(profile, model)
    tool = {e.name: e.tool_path("llama-batched-bench", runner, out, dry=True) for e in engines}
    cmds = {e: argv(t, model_path, npp, ntg, npl, profile.serving.bench) for e, t in tool.items()}
    doc = {"dry_run": True, "engines": list(tool), "model": model, "npp": npp, "ntg": ntg, "npl": npl, **blocks,
           "commands": cmds, "env": envs, "lock": str(effective_dir(profile.lock))}
    paths = {f"llama-batched-bench of {e}": c[0] for e, c in cmds.items()}
    m = profile.models.get(model)
    if m is None or (m.synth is None and m.hf is None):  # a synth or hf model is made on the first real run
        paths[f"model {model}"] = model_path
    return doc, paths


STEP_OPTIONS = {"engine", "model", "npp", "ntg", "npl", "allow_env", "engines", "aa", "repeat", "until_ci", "max_repeats", "budget_s", "order"}


def check_step(profile, options: dict) -> tuple[BenchRequest, SinglePlan | ABPlan]:
    """A bench step's options, checked as `parity bench` checks its flags (before any step runs):
    (the request, its plan: blocks (parity.bench.ab) or the single run)."""
    check_step_options("bench", options, STEP_OPTIONS)
    engines = options.get("engines")
    if isinstance(engines, str):
        options = {**options, "engines": [x.strip() for x in engines.split(",") if x.strip()]}
    req = BenchRequest(**options)
    if req.blocks():
        ab = req.ab_request()
        ab.engines = ab.engines or [e for e in [default_engine(profile)] if e]
        return req, plan_ab(profile, ab)
    engine = req.engine or (req.engines or [None])[0]
    return req, plan_single(profile, engine, req.model, req.npp, req.ntg, req.npl, req.allow_env or ())


def campaign_step(ctx, options: dict) -> dict:
    """kind: bench -- options {engine, model, npp, ntg, npl, allow_env}; blocks (an A/B, an A/A,
    repeats) with {engines (list or 'A,B'), aa, repeat, until_ci, max_repeats, budget_s, order}."""
    req, p = check_step(ctx.profile, options)
    if isinstance(p, ABPlan):
        session.prepare(ctx, p.engines, [p.model])  # the builds and the model, before the lock
        doc = run_ab(ctx.as_run(), p, session.model_file(ctx.profile, p.model), session.measuring(ctx, p.engines))
        return {"engines": doc["engines"], "reference": doc["reference"], "blocks": doc["blocks"], "stop": doc["stop"],
                "paired": [{k: p[k] for k in ("engine", "reference", "pp", "tg", "b", "metric", "ratio", "low", "high", "outcome")} for p in doc["paired"]]}  # fmt: skip
    if req.engines:  # as `parity bench`: the first of engines runs
        p = plan_single(ctx.profile, req.engines[0], req.model, req.npp, req.ntg, req.npl, req.allow_env or ())
    session.prepare(ctx, [p.engine.name], [p.model])  # the build and the model, before the lock
    doc = run_bench(ctx.as_run(), p, session.model_file(ctx.profile, p.model), session.measuring(ctx, [p.engine.name]))

    for line in lines(doc.get("efficiency")):
        ctx.out.info(line)
    return {"engine": doc["engine"], "rows": doc["rows"], "efficiency": doc.get("efficiency")}
