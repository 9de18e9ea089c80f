"""Same-session serving snapshot: lock, hardware.txt, pre-gates, every engine
over every N (ABAB across repeats), post-gates, summary.tsv/json + ratios."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

from parity.errors import ConfigError, InfraError, UsageError

ROW_KEYS = ["wall_s", "agg_tps", "decode_agg_tps", "prefill_tps", "ttft_mean_ms", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "tpot_ms", "itl_p50_ms", "itl_p99_ms"]
RATIO_KEYS = ["decode_agg_tps", "agg_tps", "prefill_tps", "ttft_p50_ms"]


@dataclass
class SnapshotPlan:
    model: str
    engines: list[str]
    reference: str | None
    npl: list[int]
    repeat: int
    shape: object  # ServingConfig with overrides
    order: list[tuple[int, str]]  # (repeat, engine) in execution order


def make_plan(ctx, npl=None, engines=None, model=None, repeat=None, **shape) -> SnapshotPlan:
    shape = {("ctx" if k == "ctx_len" else k): v for k, v in shape.items()}
    s = ctx.profile.serving
    over = {k: v for k, v in shape.items() if v is not None}
    if npl:
        over["npl"] = npl
    s = replace(s, **over)
    engines = engines or s.engines
    if not engines:
        raise UsageError(f"profile {ctx.profile.name}: no serving engines (serving.engines or --engines)")
    for e in engines:
        ctx.profile.engine(e)
    model = model or s.model
    if not model:
        raise UsageError("no model to serve (serving.model or --model)")
    repeat = repeat or s.repeat
    ref = s.reference_engine if s.reference_engine in engines else None
    order = []
    for r in range(repeat):
        seq = engines if (s.order == "aabb" or r % 2 == 0) else list(reversed(engines))
        order += [(r, e) for e in seq]
    return SnapshotPlan(model, list(engines), ref, list(s.npl), repeat, s, order)


def _check_env(ctx, plan: SnapshotPlan, allow_env) -> None:
    from parity.envpolicy import check_bench_env

    for e in plan.engines:
        check_bench_env(ctx.profile.engine(e).env, ctx.profile.policy, allow_env, context=f"benchmark (engine {e})")
        for penv in ctx.profile.engine(e).paths.values():
            check_bench_env(penv, ctx.profile.policy, allow_env, context=f"benchmark (engine {e})")


def dry_run(ctx, plan: SnapshotPlan) -> dict:
    from parity.lock import preflight
    from parity.runners.engines import adapter, model_for

    commands = []
    for e in plan.engines:
        try:
            mf = model_for(ctx, e, plan.model)
        except UsageError as err:
            mf = f"<{err}>"
        try:
            la = adapter(ctx, e).launch(ctx, e, mf, plan.shape.port, plan.shape)
            commands.append({"engine": e, "argv": la.argv, "env": la.env, "unset": la.unset, "ready": la.ready_path})
        except UsageError as err:
            commands.append({"engine": e, "error": str(err)})
    return {
        "model": plan.model,
        "engines": plan.engines,
        "npl": plan.npl,
        "repeat": plan.repeat,
        "order": [f"r{r}:{e}" for r, e in plan.order],
        "shape": {k: getattr(plan.shape, k) for k in ("ptok", "gen", "parallel", "ctx", "batch", "ubatch", "port")},
        "commands": commands,
        "preflight": preflight(ctx.runner, ctx.profile.lock),
        "lock_dir": ctx.profile.lock.dir,
    }


def _sweep_engine(ctx, plan, engine, rep, prog, task) -> list[dict]:
    from parity.runners import loadgen
    from parity.runners.engines import adapter, model_for
    from parity.runners.server import serving

    s = plan.shape
    e = ctx.profile.engine(engine)
    mf = model_for(ctx, engine, plan.model)
    la = adapter(ctx, engine).launch(ctx, engine, mf, s.port, s)
    log = str(ctx.run.file(f"servers/{engine}-r{rep}.log"))
    ctx.run.write_json(f"servers/{engine}-r{rep}.json", {"argv": la.argv, "env": la.env, "unset": la.unset})
    rows = []
    with serving(ctx, la, s.port, log, e.ready_timeout_s, e.ready_probe_timeout_s, e.stop_grace_s) as (proc, ready_s):
        target = loadgen.Target("127.0.0.1", s.port, la.served_name, la.tokenize)
        for n in plan.npl:
            prog.update(task, status=f"{engine} r{rep} N={n}")
            recs = loadgen.drive(target, n, s.ptok, s.gen, s.request_timeout_s, lambda done, tot: prog.update(task, status=f"{engine} r{rep} N={n} tokens {done}/{tot}"))
            from parity.metrics import compute

            row = {"engine": engine, "n": n, "repeat": rep, **compute(recs), "server_ready_s": round(ready_s, 2)}
            bad = [r for r in recs if not r.valid]
            ctx.run.write_json(f"requests/{engine}-r{rep}-n{n}.json", [r.__dict__ for r in recs])
            if bad:
                why = bad[0].error or f"completion_tokens {bad[0].completion_tokens} != {s.gen}"
                ctx.out.warn(f"{engine} N={n}: {len(bad)}/{n} requests invalid (first: {why}); they are not averaged in")
            if row["valid_requests"] == 0:
                raise InfraError(f"{engine} N={n}: no valid request (first error: {bad[0].error if bad else '?'}); server log: {log}")
            rows.append(row)
            prog.advance(task)
            ctx.out.info(f"  {engine:>8} r{rep} N={n:<4} decode_agg {row['decode_agg_tps']:.1f} tok/s  agg {row['agg_tps']:.1f}  prefill {row['prefill_tps']:.1f}  ttft p50 {row['ttft_p50_ms']:.1f} ms  ({row['valid_requests']}/{n} valid)")
            if proc.poll() is not None:
                raise InfraError(f"{engine} server died during N={n}; log: {log}")
    return rows


def medians(rows: list[dict]) -> list[dict]:
    out = []
    keys = sorted({(r["engine"], r["n"]) for r in rows}, key=lambda k: (k[0], k[1]))
    for eng, n in keys:
        rs = [r for r in rows if r["engine"] == eng and r["n"] == n]
        m = {"engine": eng, "n": n, "repeats": len(rs)}
        for k in ROW_KEYS:
            vals = [r[k] for r in rs if isinstance(r.get(k), (int, float)) and math.isfinite(r[k])]
            m[k] = round(statistics.median(vals), 4) if vals else None
        out.append(m)
    return out


def ratios(med: list[dict], reference: str | None) -> list[dict]:
    if not reference:
        return []
    ref = {m["n"]: m for m in med if m["engine"] == reference}
    out = []
    for m in med:
        if m["engine"] == reference or m["n"] not in ref:
            continue
        r = {"engine": m["engine"], "reference": reference, "n": m["n"]}
        for k in RATIO_KEYS:
            a, b = m.get(k), ref[m["n"]].get(k)
            r[k] = round(a / b, 4) if a and b else None
        out.append(r)
    return out


def write_summary(ctx, plan: SnapshotPlan, rows: list[dict]) -> dict:
    med = medians(rows)
    doc = {
        "kind": "snapshot",
        "model": plan.model,
        "engines": plan.engines,
        "reference_engine": plan.reference,
        "shape": {"ptok": plan.shape.ptok, "gen": plan.shape.gen, "parallel": plan.shape.parallel, "ctx": plan.shape.ctx, "npl": plan.npl, "repeat": plan.repeat},
        "rows": rows,
        "medians": med,
        "ratios": ratios(med, plan.reference),
    }
    ctx.run.write_json("summary.json", doc)
    cols = ["engine", "n", "repeat", *ROW_KEYS, "requests", "valid_requests", "short_requests"]
    lines = ["\t".join(cols)] + ["\t".join(str(r.get(c, "")) for c in cols) for r in rows]
    for m in med:
        lines.append("\t".join(str(m.get(c, "median" if c == "repeat" else "")) for c in cols))
    ctx.run.write_text("summary.tsv", "\n".join(lines) + "\n")
    return doc


def run_snapshot(ctx, plan: SnapshotPlan, gates: bool = True, allow_env=()) -> dict:
    from parity.engine.build import write_builds_json
    from parity.gates.prepost import gated
    from parity.hardware import write_hardware
    from parity.lock import held_lock

    _check_env(ctx, plan, allow_env)
    write_hardware(ctx)  # before any server starts (Phase 24)
    write_builds_json(ctx, plan.engines)
    rows: list[dict] = []
    with held_lock(ctx), gated(ctx, enabled=gates):
        with ctx.out.progress(transient=False) as prog:
            task = prog.add_task("snapshot", total=len(plan.order) * len(plan.npl), status="")
            for rep, engine in plan.order:
                rows += _sweep_engine(ctx, plan, engine, rep, prog, task)
                write_summary(ctx, plan, rows)  # partial results survive a later failure
    return write_summary(ctx, plan, rows)


def campaign_step(ctx, options: dict) -> dict:
    """kind: snapshot -- options {npl, engines, model, repeat, ptok, gen, parallel, ctx, gates}."""
    allowed = {"npl", "engines", "model", "repeat", "ptok", "gen", "parallel", "ctx", "gates", "allow_env"}
    bad = set(options) - allowed
    if bad:
        raise ConfigError("campaign", f"with.{sorted(bad)[0]}", f"unknown snapshot option (known: {', '.join(sorted(allowed))})")
    gates = bool(options.pop("gates", False))  # campaigns usually run gate steps around it
    allow = options.pop("allow_env", [])
    if "ctx" in options:
        options["ctx_len"] = options.pop("ctx")
    plan = make_plan(ctx, **options)
    doc = run_snapshot(ctx, plan, gates=gates, allow_env=allow)
    return {"medians": doc["medians"], "ratios": doc["ratios"]}
