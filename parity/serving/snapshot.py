"""Same-session serving snapshot: lock, hardware.txt, pre-gates, every engine
over every N (ABAB across repeats), post-gates, summary.tsv/json + ratios."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace

from parity.config import positive_int
from parity.errors import InfraError, UsageError

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


def make_plan(ctx, req: SnapshotRequest) -> SnapshotPlan:
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
    engines = engines or s.engines
    if not engines:
        raise UsageError(f"profile {ctx.profile.name}: no serving engines (serving.engines or --engines)")
    if len(set(engines)) != len(engines):
        raise UsageError(f"--engines: an engine is listed twice ({', '.join(engines)}); use --repeat for repeats")
    for e in engines:
        ctx.profile.engine(e)
    if s.parallel < max(s.npl) and any(ctx.profile.engine(e).kind == "llama" for e in engines):
        raise UsageError(f"N={max(s.npl)} exceeds --parallel {s.parallel}: llama-server would queue requests; raise --parallel")
    model = req.model or s.model
    if not model:
        raise UsageError("no model to serve (serving.model or --model)")
    repeat = req.repeat or s.repeat
    ref = s.reference_engine if s.reference_engine in engines else (engines[-1] if len(engines) > 1 else None)
    return SnapshotPlan(model, list(engines), ref, list(s.npl), repeat, s, run_order(list(engines), repeat, s.order))


def snapshot(ctx, req: SnapshotRequest) -> dict:
    """`parity snapshot`: the dry-run plan, or a run directory with the gated sweep's summary."""
    from parity.context import run_session

    plan = make_plan(ctx, req)
    if req.dry_run:
        check_env(ctx, plan, req.allow_env)
        return dry_run(ctx, plan)
    with run_session(ctx, "snapshot", f"snapshot-{plan.model}"):
        if not req.gates:
            ctx.run.mark_invalid("ungated: --no-gates")
        doc = run_snapshot(ctx, plan, gates=req.gates, allow_env=req.allow_env)
        return {"run_dir": str(ctx.run.path), **doc}


def run_order(engines: list[str], repeat: int, order: str) -> list[tuple[int, str]]:
    """abab: A B A B (every repeat in engine order); abba: A B B A (alternating, cancels
    linear drift); aabb: every repeat of A, then of B."""
    if order == "aabb":
        return [(r, e) for e in engines for r in range(repeat)]
    out = []
    for r in range(repeat):
        seq = list(reversed(engines)) if order == "abba" and r % 2 else engines
        out += [(r, e) for e in seq]
    return out


def check_env(ctx, plan: SnapshotPlan, allow_env) -> None:
    from parity.serving.envpolicy import check_bench_env
    from parity.serving.engines import adapter

    for e in plan.engines:
        env = adapter(ctx, e).env(ctx, e)
        check_bench_env(env, ctx.profile.policy, allow_env, context=f"benchmark (engine {e})")


def dry_run(ctx, plan: SnapshotPlan) -> dict:
    from parity.gpu.lock import preflight
    from parity.serving.metrics import definitions
    from parity.serving.engines import adapter, model_for
    from parity.serving.server import port_free

    commands = []
    for e in plan.engines:
        try:
            mf, model_error = model_for(ctx, e, plan.model), None
        except UsageError as err:  # still show the command, with a placeholder for the file
            mf, model_error = f"<{err}>", str(err)
        try:
            la = adapter(ctx, e).launch(ctx, e, mf, plan.shape.port, plan.shape, dry=True, model=plan.model)
            eng = ctx.profile.engine(e)
            commands.append({"engine": e, "argv": la.argv, "env": la.env, "unset": la.unset, "ready": f"http://127.0.0.1:{plan.shape.port}{la.ready_path}",
                             "served_name": None if model_error else la.served_name, "model_error": model_error,
                             "ready_timeout_s": eng.ready_timeout_s, "ready_probe_timeout_s": eng.ready_probe_timeout_s})  # fmt: skip
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
        "port_free": port_free(plan.shape.port),
        "metrics": definitions(ROW_KEYS),
    }


def _sweep_engine(ctx, plan, engine, rep, prog, task) -> list[dict]:
    from parity.serving.metrics import compute
    from parity.serving import loadgen
    from parity.serving.engines import adapter, model_for
    from parity.serving.server import scrape, serving

    s = plan.shape
    e = ctx.profile.engine(engine)
    mf = model_for(ctx, engine, plan.model)
    la = adapter(ctx, engine).launch(ctx, engine, mf, s.port, s, model=plan.model)
    log = str(ctx.run.file(f"servers/{engine}-r{rep}.log"))
    ctx.run.write_json(f"servers/{engine}-r{rep}.json", {"argv": la.argv, "env": la.env, "unset": la.unset, "served_name": la.served_name})
    rows = []
    prog.update(task, status=f"{engine} r{rep}: starting server (budget {e.ready_timeout_s:g} s)")
    with serving(ctx, la, s.port, log, e.ready_timeout_s, e.ready_probe_timeout_s, e.stop_grace_s) as (proc, ready_s):
        target = loadgen.Target("127.0.0.1", s.port, la.served_name, la.tokenize)
        for n in plan.npl:
            label = f"{engine} r{rep} N={n}"
            prog.update(task, status=f"{label}: building prompts")

            def show(p, label=label, n=n):
                prog.update(task, status=f"{label}: {p.done}/{n} requests, {p.tokens} tokens, {p.tps():.1f} tok/s")

            recs = loadgen.drive(target, n, s.ptok, s.gen, s.request_timeout_s, show)
            row = {"engine": engine, "n": n, "repeat": rep, **compute(recs), "server_ready_s": round(ready_s, 2)}
            ctx.run.write_json(f"requests/{engine}-r{rep}-n{n}.json", [r.__dict__ for r in recs])
            text = scrape(s.port, la.metrics_path)
            if text is not None:
                ctx.run.write_text(f"servers/{engine}-r{rep}-n{n}.metrics.txt", text)
            bad = [r for r in recs if not r.valid]
            if bad:
                why = bad[0].error or f"completion_tokens {bad[0].completion_tokens} != {s.gen}"
                ctx.out.warn(f"{label}: {len(bad)}/{n} requests invalid (first: {why}); they are not averaged in")
            if row["valid_requests"] == 0:
                raise InfraError(f"{label}: no valid request (first problem: {why}); server log: {log}")
            rows.append(row)
            prog.advance(task)
            ctx.out.info(f"  {engine:>8} r{rep} N={n:<4} decode_agg {row['decode_agg_tps']} tok/s  agg {row['agg_tps']}  prefill {row['prefill_tps']}  ttft p50 {row['ttft_p50_ms']} ms  ({row['valid_requests']}/{n} valid)")
            if proc.poll() is not None:
                raise InfraError(f"{engine} server exited during N={n}; log: {log}")
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
    from parity.serving.metrics import definitions

    med = medians(rows)
    rat = ratios(med, plan.reference)
    doc = {
        "kind": "snapshot",
        "model": plan.model,
        "engines": plan.engines,
        "reference_engine": plan.reference,
        "shape": {"ptok": plan.shape.ptok, "gen": plan.shape.gen, "parallel": plan.shape.parallel, "ctx": plan.shape.ctx, "npl": plan.npl, "repeat": plan.repeat},
        "order": [f"r{r}:{e}" for r, e in plan.order],
        "rows": rows,
        "medians": med,
        "ratios": rat,
        "metrics": definitions(ROW_KEYS),
    }
    ctx.run.write_json("summary.json", doc)
    cols = ["kind", "engine", "n", "repeat", "reference", *ROW_KEYS, "requests", "valid_requests", "short_requests"]
    lines = ["\t".join(cols)]
    for kind, items in (("row", rows), ("median", med), ("ratio", rat)):
        for r in items:
            r = {"kind": kind, **r, **({"repeat": "median"} if kind == "median" else {})}
            lines.append("\t".join("" if r.get(c) is None else str(r.get(c)) for c in cols))
    ctx.run.write_text("summary.tsv", "\n".join(lines) + "\n")
    return doc


def run_snapshot(ctx, plan: SnapshotPlan, gates: bool = True, allow_env=()) -> dict:
    from parity.engine.build import write_builds_json
    from parity.gates.prepost import gated
    from parity.gpu.hardware import write_hardware
    from parity.gpu.lock import held_lock

    check_env(ctx, plan, allow_env)
    with held_lock(ctx):
        write_hardware(ctx)  # before any server starts (Phase 24)
        write_builds_json(ctx, [e for e in plan.engines if ctx.profile.engine(e).kind == "llama"])
        with gated(ctx, enabled=gates):
            rows = _sweep_all(ctx, plan)
    return write_summary(ctx, plan, rows)


def _sweep_all(ctx, plan: SnapshotPlan) -> list[dict]:
    rows: list[dict] = []
    with ctx.out.progress(transient=False) as prog:
        task = prog.add_task("snapshot", total=len(plan.order) * len(plan.npl), status="")
        for rep, engine in plan.order:
            rows += _sweep_engine(ctx, plan, engine, rep, prog, task)
            write_summary(ctx, plan, rows)  # partial results survive a later failure
    return rows


def campaign_step(ctx, options: dict) -> dict:
    """kind: snapshot -- options {npl, engines, model, repeat, ptok, gen, parallel, ctx, order, gates, allow_env}."""
    from parity.campaign import check_step_options

    check_step_options("snapshot", options, {"npl", "engines", "model", "repeat", "ptok", "gen", "parallel", "ctx", "order", "gates", "allow_env"})
    options = {"gates": False, **options}  # campaigns usually run gate steps around it
    options["gates"] = bool(options["gates"])
    req = SnapshotRequest(**options)
    doc = run_snapshot(ctx, make_plan(ctx, req), gates=req.gates, allow_env=req.allow_env)
    return {"medians": doc["medians"], "ratios": doc["ratios"]}
