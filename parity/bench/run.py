"""`parity bench` and the campaign's bench step: one llama-batched-bench run (parity.bench.batched_bench)
or blocks of runs with paired statistics (parity.bench.ab)."""

from __future__ import annotations

from parity.bench.ab import arms_for, run_ab
from parity.bench.batched_bench import default_engine, run_bench
from parity.bench.request import BenchRequest
from parity.context import run_session
from parity.errors import UsageError
from parity.options import check_step_options
from parity.efficiency.roofline import lines


def bench(ctx, req: BenchRequest) -> dict:
    """`parity bench`: a run directory with bench.json (one run, or blocks: parity.bench.ab)."""
    if req.blocks():
        ab = req.ab_request()
        if not ab.engines:
            ab.engines = [e for e in [default_engine(ctx)] if e]
        if not ab.engines:
            raise UsageError("no llama engine to bench (serving.engines or --engines)")
        arms_for(ab.engines, ab.aa)  # refuse a bad arm list before the run directory exists
        with run_session(ctx, "bench", "bench-ab" if len(ab.engines) > 1 or ab.aa else "bench"):
            doc = run_ab(ctx, ab)
            return {"run_dir": str(ctx.run.path), **doc}
    if req.engines:
        req.engine = req.engines[0]
    with run_session(ctx, "bench", "bench"):
        doc = run_bench(ctx, req.engine, req.model, req.npp, req.ntg, req.npl, req.allow_env)
        return {"run_dir": str(ctx.run.path), **doc}


STEP_OPTIONS = {"engine", "model", "npp", "ntg", "npl", "allow_env", "engines", "aa", "repeat", "until_ci", "max_repeats", "budget_s", "order"}


def campaign_step(ctx, options: dict) -> dict:
    """kind: bench -- options {engine, model, npp, ntg, npl, allow_env}; blocks (an A/B, an A/A,
    repeats) with {engines (list or 'A,B'), aa, repeat, until_ci, max_repeats, budget_s, order}."""
    check_step_options("bench", options, STEP_OPTIONS)
    engines = options.get("engines")
    if isinstance(engines, str):
        options = {**options, "engines": [x.strip() for x in engines.split(",") if x.strip()]}
    req = BenchRequest(**options)
    if req.blocks():
        ab = req.ab_request()
        ab.engines = ab.engines or [e for e in [default_engine(ctx)] if e]
        doc = run_ab(ctx, ab)
        return {"engines": doc["engines"], "reference": doc["reference"], "blocks": doc["blocks"], "stop": doc["stop"],
                "paired": [{k: p[k] for k in ("engine", "reference", "pp", "tg", "b", "metric", "ratio", "low", "high", "outcome")} for p in doc["paired"]]}  # fmt: skip
    if req.engines:
        req.engine = req.engines[0]
    doc = run_bench(ctx, req.engine, req.model, req.npp, req.ntg, req.npl, req.allow_env or ())

    for line in lines(doc.get("efficiency")):
        ctx.out.info(line)
    return {"engine": doc["engine"], "rows": doc["rows"], "efficiency": doc.get("efficiency")}
