"""`parity bench` and the campaign's bench step: one llama-batched-bench run (parity.bench.batched_bench)
or blocks of runs with paired statistics (parity.bench.ab)."""

from __future__ import annotations

import os

from parity import session
from parity.bench.ab import plan_ab, run_ab
from parity.bench.batched_bench import argv, default_engine, plan_single, run_bench
from parity.bench.request import BenchRequest
from parity.context import run_session
from parity.engines import kind_of
from parity.gonogo import dry_run_session, go_no_go
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

        def tool(e: str, dry: bool) -> str:
            return kind_of(ctx.profile, e).tool_path(ctx.profile, e, opplan.TOOL, ctx.runner, ctx.out, dry=dry)

        if req.dry_run:
            bins = {e: tool(e, True) for e in p.engines}
            fmt = opmeasure.probe_output(ctx.runner, bins, p.envs) if all(map(os.path.isfile, bins.values())) else None
            doc = {"dry_run": True, **opplan.describe(p, bins, fmt), "lock": str(effective_dir(ctx.profile.lock))}
            with dry_run_session(ctx, "bench", f"bench-ops-{'-'.join(p.ops)}"[:60]) as rd:
                doc["go_no_go"] = go_no_go(ctx, paths={f"{opplan.TOOL} of {e}": b for e, b in bins.items()})
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
    if req.blocks():
        ab = req.ab_request()
        if not ab.engines:
            ab.engines = [e for e in [default_engine(ctx)] if e]
        if not ab.engines:
            raise UsageError("no llama engine to bench (serving.engines or --engines)")
        p = plan_ab(ctx, ab)
        if req.dry_run:
            return dry_run(ctx, "bench-ab", {"arms": [a.name for a in p.arms], "reference": p.reference, "order": p.order, "blocks": p.budget.describe()}, p.engines, p.model, p.npp, p.ntg, p.npl, p.envs)
        with run_session(ctx, "bench", "bench-ab" if len(ab.engines) > 1 or ab.aa else "bench"):
            doc = run_ab(ctx, ab)
            return {"run_dir": str(ctx.run.path), **doc}
    if req.engines:
        req.engine = req.engines[0]
    p = plan_single(ctx, req.engine, req.model, req.npp, req.ntg, req.npl, req.allow_env)
    if req.dry_run:
        return dry_run(ctx, "bench", {}, [p["engine"]], p["model"], p["npp"], p["ntg"], p["npl"], {p["engine"]: p["env"]})
    with run_session(ctx, "bench", "bench"):
        doc = run_bench(ctx, req.engine, req.model, req.npp, req.ntg, req.npl, req.allow_env)
        return {"run_dir": str(ctx.run.path), **doc}


def ops_request(req: BenchRequest) -> opplan.OpsRequest:
    """--ops: the op timing's request (UsageError for a batched-bench option beside it)."""
    if given := [f for f in ("npp", "ntg", "npl", "model") if getattr(req, f) is not None]:
        raise UsageError(f"--{given[0]} is llama-batched-bench's; --ops times test-backend-ops perf (no model)")
    engines = list(req.engines or ([req.engine] if req.engine else []))
    return opplan.OpsRequest(req.ops, engines, None, req.aa, req.ops_backend, req.ops_params, req.repeat, req.until_ci,
                             req.max_repeats, req.budget_s, req.order, list(req.allow_env or []))


def dry_run(ctx, slug: str, blocks: dict, engines: list[str], model: str, npp, ntg, npl, envs: dict) -> dict:
    """What the real run would run (the llama-batched-bench command of each engine, its env), the
    lock it would take, and the go / no-go with its evidence in a dry-run run dir."""
    b = ctx.profile.serving.bench
    model_path = session.model_file_if_there(ctx, model)
    cmds = {e: argv(kind_of(ctx.profile, e).tool_path(ctx.profile, e, "llama-batched-bench", ctx.runner, ctx.out, dry=True), model_path, npp, ntg, npl, b) for e in engines}
    doc = {"dry_run": True, "engines": engines, "model": model, "npp": npp, "ntg": ntg, "npl": npl, **blocks, "commands": cmds, "env": envs,
           "lock": str(effective_dir(ctx.profile.lock))}  # fmt: skip
    paths = {f"llama-batched-bench of {e}": c[0] for e, c in cmds.items()}
    m = ctx.profile.models.get(model)
    if m is None or (m.synth is None and m.hf is None):  # a synth or hf model is made on the first real run
        paths[f"model {model}"] = model_path
    with dry_run_session(ctx, "bench", f"{slug}-{model}") as rd:
        doc["go_no_go"] = go_no_go(ctx, paths=paths)
        doc["run_dir"] = str(rd.path)
        rd.write_json("plan.json", doc)
    return doc


STEP_OPTIONS = {"engine", "model", "npp", "ntg", "npl", "allow_env", "engines", "aa", "repeat", "until_ci", "max_repeats", "budget_s", "order"}


def check_step(ctx, options: dict) -> tuple[BenchRequest, BenchRequest | None]:
    """A bench step's options, checked as `parity bench` checks its flags (before any step runs):
    (the request, its A/B request when it runs blocks)."""
    check_step_options("bench", options, STEP_OPTIONS)
    engines = options.get("engines")
    if isinstance(engines, str):
        options = {**options, "engines": [x.strip() for x in engines.split(",") if x.strip()]}
    req = BenchRequest(**options)
    if req.blocks():
        ab = req.ab_request()
        ab.engines = ab.engines or [e for e in [default_engine(ctx)] if e]
        plan_ab(ctx, ab)
        return req, ab
    plan_single(ctx, req.engine or (req.engines or [None])[0], req.model, req.npp, req.ntg, req.npl, req.allow_env or ())
    return req, None


def campaign_step(ctx, options: dict) -> dict:
    """kind: bench -- options {engine, model, npp, ntg, npl, allow_env}; blocks (an A/B, an A/A,
    repeats) with {engines (list or 'A,B'), aa, repeat, until_ci, max_repeats, budget_s, order}."""
    req, ab = check_step(ctx, options)
    if ab is not None:
        doc = run_ab(ctx, ab)
        return {"engines": doc["engines"], "reference": doc["reference"], "blocks": doc["blocks"], "stop": doc["stop"],
                "paired": [{k: p[k] for k in ("engine", "reference", "pp", "tg", "b", "metric", "ratio", "low", "high", "outcome")} for p in doc["paired"]]}  # fmt: skip
    if req.engines:
        req.engine = req.engines[0]
    doc = run_bench(ctx, req.engine, req.model, req.npp, req.ntg, req.npl, req.allow_env or ())

    for line in lines(doc.get("efficiency")):
        ctx.out.info(line)
    return {"engine": doc["engine"], "rows": doc["rows"], "efficiency": doc.get("efficiency")}
