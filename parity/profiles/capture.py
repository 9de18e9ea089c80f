"""Graph-node nsys captures of a workload, one per ntg, then bucket analysis.

Decode runs as replayed CUDA graphs: a profile without --cuda-graph-trace=node
collapses each replay into one opaque launch (seed 000 section 3.4), so a
capture without it is refused unless --allow-collapsed asks for one, and then
the manifest and analysis.json say collapsed=true.

bench: nsys wraps llama-batched-bench -npp NPP -ntg NTG -npl NPL, once per ntg.
serve: nsys wraps the engine's server while the load generator sends NPL
requests of NPP prompt tokens and NTG generated tokens; the report is written
when the server is stopped.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from parity import session
from parity.engines import kind_of
from parity.errors import InfraError, UsageError

WORKLOADS = ("bench", "serve")
REFUSAL = (
    "refusing to profile decode without --cuda-graph-trace=node: each CUDA-graph replay would collapse into one opaque launch "
    "and every per-kernel attribution would be wrong (seed 000 section 3.4); pass --graph-node "
    "(or --allow-collapsed for a comparison capture that is marked collapsed)"
)


@dataclass
class Capture:
    label: str
    engine: str
    ntg: int
    out_base: str  # nsys -o: the report is out_base + ".nsys-rep"
    argv: list[str]  # the full nsys command
    workload_argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    unset: list[str] = field(default_factory=list)
    server: object = None  # serve: the engine's Launch (ready path, served name, tokenize dialect)


@dataclass
class ProfilePlan:
    engine: str
    workload: str
    model: str
    ntgs: list[int]
    npl: int
    npp: int
    graph_node: bool
    collapsed: bool
    captures: list[Capture]
    nsys: str


def check_graph_node(graph_node: bool | None, allow_collapsed: bool) -> bool:
    """True when the capture is collapsed (allowed); raises the one-line refusal otherwise."""
    if graph_node:
        return False
    if allow_collapsed:
        return True
    raise UsageError(REFUSAL)


def make_plan(ctx, *, engine=None, workload="bench", ntgs=None, npl=None, npp=None, model=None, graph_node=None, allow_collapsed=False, out_dir="<run>/profile", dry=False) -> ProfilePlan:
    from parity.profiles import nsys as nsysmod

    collapsed = check_graph_node(graph_node, allow_collapsed)
    if workload not in WORKLOADS:
        raise UsageError(f"--workload {workload!r}: expected one of {', '.join(WORKLOADS)}")
    prof = ctx.profile
    p = prof.profiling
    engine = engine or _default_engine(ctx, workload)
    e, kind = prof.engine(engine), kind_of(prof, engine)
    if workload == "bench" and not kind.binary_gates:
        raise UsageError(f"engine {engine} is {e.kind}: the bench workload runs llama-batched-bench; profile {e.kind} with --workload serve")
    if workload == "serve" and not kind.profiled_serving:
        raise UsageError(f"engine {engine} is {e.kind}: parity does not start its server, so it cannot run it under the profiler (profile it where it runs)")
    ntgs = list(ntgs or p.ntg)
    if len(set(ntgs)) != len(ntgs):
        raise UsageError(f"--ntg {ntgs}: values must differ")
    npl, npp = npl or p.npl, npp or p.npp
    model = model or prof.serving.model
    if not model:
        raise UsageError("no model to profile (serving.model or --model)")
    nsys_bin = _nsys_binary(ctx, dry)
    # what does not depend on ntg: the model, the engine's binary, env, the server launch
    if workload == "bench":
        model_file, binary = _model_file(ctx, model, dry), _bench_binary(ctx, engine, dry)
        env, unset, server = kind.env(prof, engine), [], None
    else:
        server = _serve_launch(ctx, engine, model, npl, dry)
        env, unset = server.env, server.unset
    captures = []
    for ntg in ntgs:
        label = f"{engine}-{workload}-ntg{ntg}{'-collapsed' if collapsed else ''}"
        out_base = os.path.join(out_dir, label)
        wl = _bench_argv(ctx, binary, model_file, npp, ntg, npl) if workload == "bench" else server.argv
        argv = nsysmod.profile_argv(nsys_bin, out_base, wl, graph_node=not collapsed, trace=p.trace, extra=p.extra_args, fork=kind.forks)
        captures.append(Capture(label, engine, ntg, out_base, argv, wl, env, unset, server))
    return ProfilePlan(engine, workload, model, ntgs, npl, npp, not collapsed, collapsed, captures, nsys_bin)


def _model_file(ctx, model: str, dry: bool) -> str:
    """The model's file; a dry run on a workstation shows the configured path even when it is
    not there (the capture runs on the GPU box)."""
    try:
        return session.model_file(ctx, model) if not dry else session.model_file_if_there(ctx, model)
    except UsageError:
        if dry and model in ctx.profile.models and ctx.profile.models[model].path:
            return ctx.profile.models[model].path
        raise


def _default_engine(ctx, workload: str) -> str:
    s = ctx.profile.serving
    for name in s.engines or list(ctx.profile.engines):
        kind = kind_of(ctx.profile, name)
        if kind.binary_gates if workload == "bench" else kind.profiled_serving:
            return name
    raise UsageError(f"profile {ctx.profile.name}: no engine to profile (--engine)")


def _nsys_binary(ctx, dry: bool) -> str:
    name = ctx.profile.profiling.nsys
    found = ctx.runner.which(name) if "/" not in name else (name if os.path.isfile(name) else None)
    if found:
        return found
    if dry:
        return name
    raise UsageError(f"nsys ({name}) not found on {ctx.runner.host}: install Nsight Systems or set profiling.nsys to its path")


def _bench_binary(ctx, engine: str, dry: bool) -> str:
    return kind_of(ctx.profile, engine).tool_path(ctx.profile, engine, "llama-batched-bench", ctx.runner, ctx.out, dry=dry)


def _bench_argv(ctx, binary: str, model_file: str, npp: int, ntg: int, npl: int) -> list[str]:
    from parity.bench.batched_bench import argv

    return argv(binary, model_file, [npp], [ntg], [npl], ctx.profile.serving.bench)


def _serve_launch(ctx, engine: str, model: str, npl: int, dry: bool):
    s = _serve_shape(ctx, npl)
    kind = kind_of(ctx.profile, engine)
    # as in snapshot: --model names the served model, and a dry run builds nothing
    return kind.launch(ctx.profile, engine, kind.model_file(ctx.profile, engine, model), s.port, s, dry=dry, model=model, out=ctx.out)


def _serve_shape(ctx, npl: int):
    s = ctx.profile.serving
    return replace(s, parallel=max(s.parallel, npl))


def dry_run(ctx, plan: ProfilePlan) -> dict:
    from parity.gpu.lock import effective_dir as lock_effective_dir

    import shlex

    return {
        "engine": plan.engine,
        "workload": plan.workload,
        "model": plan.model,
        "ntg": plan.ntgs,
        "npl": plan.npl,
        "npp": plan.npp,
        "graph_node": plan.graph_node,
        "collapsed": plan.collapsed,
        "commands": [{"label": c.label, "ntg": c.ntg, "argv": c.argv, "env": c.env, "unset": c.unset, "shell": " ".join(shlex.quote(a) for a in c.argv)} for c in plan.captures],
        "export": f"{plan.nsys} export --type sqlite --output OUT.sqlite --force-overwrite true OUT.nsys-rep",
        "lock_dir": str(lock_effective_dir(ctx.profile.lock)),
    }


def dry_paths(ctx, plan: ProfilePlan) -> dict[str, str]:
    """The files the real capture needs, for the go/no-go: nsys, the workload binary, the model."""
    paths = {}
    nsys = plan.nsys
    paths["nsys"] = nsys if "/" in nsys else f"<nsys: {nsys!r} is not on PATH (profiling.nsys)>"
    wl = plan.captures[0].workload_argv
    exe = wl[0]
    paths[f"{os.path.basename(exe)} of {plan.engine}"] = exe if "/" in exe or exe.startswith("<") else (ctx.runner.which(exe) or f"<{exe}: not on PATH>")
    m = ctx.profile.models.get(plan.model)
    if not (m and m.synth):  # a synth model is made on the first real run
        model_file = wl[wl.index("-m") + 1] if "-m" in wl else (wl[wl.index("serve") + 1] if "serve" in wl else None)
        if model_file:
            paths[f"model {plan.model}"] = model_file
    return paths


def run_profile(ctx, plan: ProfilePlan, allow_env=()) -> dict:
    """Capture every ntg under the GPU lock, export, bucket, difference; write profile/*."""
    from parity.engines.envpolicy import check_bench_env
    from parity.profiles.analysis import auto_differences, build_doc, write_outputs
    from parity.profiles.buckets import table_for

    rd = ctx.require_run()
    for c in plan.captures:
        check_bench_env(c.env, ctx.profile.policy, allow_env, context=f"profile (engine {c.engine})")
    rd.update(collapsed=plan.collapsed, profile={"graph_node": plan.graph_node, "collapsed": plan.collapsed, "workload": plan.workload, "engine": plan.engine, "commands": [c.argv for c in plan.captures]})
    session.prepare(ctx, [plan.engine], [plan.model])  # before the lock (make_plan found or built it already)
    table = table_for(ctx.profile.profiling)
    captures = []
    with session.measuring(ctx, [plan.engine]):
        for c in plan.captures:
            ctx.out.info(f"[profile] {c.label}: {' '.join(c.argv[:4])} ... ({plan.workload}, ntg {c.ntg}, npl {plan.npl})")
            rows = _capture_bench(ctx, c, plan) if plan.workload == "bench" else _capture_serve(ctx, c, plan)
            rep = c.out_base + ".nsys-rep"
            check_analysis(c.out_base + ".log")
            if not os.path.isfile(rep):
                raise InfraError(f"nsys wrote no report at {rep} (log: {c.out_base}.log)")
            from parity.profiles.analysis import analyze_file

            cap = analyze_file(rep, table, label=c.label, engine=c.engine, ntg=c.ntg, npl=plan.npl, top_unmatched=ctx.profile.profiling.top_unmatched,
                               after_nvtx=ctx.profile.profiling.decode_after_nvtx, runner=ctx.runner, nsys=plan.nsys, collapsed=plan.collapsed)  # fmt: skip
            cap["command"] = c.argv
            cap["workload_rows"] = rows
            captures.append(cap)
    if not plan.collapsed and any(c["collapsed"] for c in captures):  # the export says graph mode whatever was asked
        rd.update(collapsed=True)
    diffs = auto_differences(captures)
    doc = build_doc(captures, diff=diffs, bucket_table=table.source)
    files = write_outputs(rd.path / "profile", doc)
    return {**doc, "files": files}


def check_analysis(log_path: str) -> None:
    """nsys exits 0 when its own analysis failed (seen on an H100: an nsys older than the CUDA
    runtime); the report it leaves lacks the kernel table, which is not the capture flags' fault."""
    from parity.profiles.nsys import analysis_failure

    try:
        text = open(log_path, errors="replace").read()
    except OSError:
        return
    why = analysis_failure(text)
    if why:
        raise InfraError(f"nsys exited 0 but its analysis failed ({why}; log {log_path}): the report is incomplete. "
                         "This nsys cannot post-process this CUDA runtime: use an Nsight Systems at least as new as the CUDA toolkit")  # fmt: skip


def _capture_bench(ctx, c: Capture, plan: ProfilePlan) -> list[dict]:
    """Run nsys around llama-batched-bench; returns the bench table rows (maybe empty, see below)."""
    from parity.bench import batched_bench

    os.makedirs(os.path.dirname(c.out_base), exist_ok=True)
    res = ctx.runner.run(c.argv, env=c.env, unset=c.unset, timeout=ctx.profile.profiling.timeout_s)
    text = res.stdout + "\n" + res.stderr
    with open(c.out_base + ".log", "w") as f:
        f.write(text)
    rows = batched_bench.parse(res.stdout)
    why = batched_bench.failure(text)
    if res.timed_out or res.rc != 0 or why or len(rows) > 1:
        detail = why or (f"timed out after {ctx.profile.profiling.timeout_s:.0f} s" if res.timed_out else f"exit {res.rc}")
        raise InfraError(f"profiled llama-batched-bench failed ({len(rows)} table rows): {detail}; log {c.out_base}.log: {res.tail(3)}")
    if not rows:
        # llama.cpp's common_log singleton is leaked on purpose (upstream issue 22142): its worker
        # thread can die at exit before printing the last lines.  A failed decode exits non-zero,
        # so exit 0 without the row is a lost log line, not a failed workload: the profile stands.
        ctx.out.warn(f"{c.label}: llama-batched-bench exited 0 but its table row was lost at exit (llama.cpp common_log); the capture is kept")
    return rows


def _capture_serve(ctx, c: Capture, plan: ProfilePlan) -> list[dict]:
    import asyncio

    from parity.loadgen.client import Target, drive
    from parity.loadgen.prompts import token_prompts
    from parity.engines.server import serving
    from parity.metrics.validity import check_request, reason

    e = ctx.profile.engine(c.engine)
    s = _serve_shape(ctx, plan.npl)
    base = c.server
    la = replace(base, argv=c.argv)  # the nsys-wrapped command; readiness, model check, names as launched
    os.makedirs(os.path.dirname(c.out_base), exist_ok=True)
    # nsys writes the report after the server stops: give it time before SIGKILL.  The stop
    # signal goes to nsys alone: it ends the server itself (its --kill: SIGTERM), and a second
    # signal sends llama-server down its "terminating immediately" exit(1), which hung at exit
    # here (a busy 2-core box) until the SIGKILL, so nsys wrote no report
    with serving(ctx, la, s.port, c.out_base + ".log", e.ready_timeout_s * 2, e.ready_probe_timeout_s, e.stop_grace_s + 120, leader_only=True):
        t = Target(base.host, base.port, base.served_name, base.tokenize, count=base.count, extra=base.request_extra)
        specs = asyncio.run(token_prompts(t, plan.npl, plan.npp, c.ntg))
        recs = [check_request(r) for r in drive(t, specs, s.request_timeout_s)]
    bad = [r for r in recs if not r.valid]
    if bad:
        raise InfraError(f"{len(bad)}/{len(recs)} requests failed under the profiler: {reason(bad[0])}")
    return [{"requests": len(recs), "completion_tokens": sum(r.tokens for r in recs)}]


@dataclass
class ProfileRequest:
    """What `parity profile` asks for; None keeps the profile's profiling settings."""

    graph_node: bool | None = None
    allow_collapsed: bool = False
    engine: str | None = None
    workload: str = "bench"
    ntgs: list[int] | None = None
    npl: int | None = None
    npp: int | None = None
    model: str | None = None
    allow_env: list[str] = field(default_factory=list)
    dry_run: bool = False


def profile(ctx, req: ProfileRequest) -> dict:
    """`parity profile`: the dry-run commands, or captures + analysis in a new run directory."""
    from parity.context import run_session

    check_graph_node(req.graph_node, req.allow_collapsed)
    for name, v in (("--npl", req.npl), ("--npp", req.npp)):
        if v is not None and v <= 0:
            raise UsageError(f"{name} must be positive")
    options = dict(engine=req.engine, workload=req.workload, ntgs=req.ntgs, npl=req.npl, npp=req.npp, model=req.model, graph_node=req.graph_node, allow_collapsed=req.allow_collapsed)
    if req.dry_run:  # a go/no-go with its evidence in a `dry-run` run dir; the CLI exits with its code
        from parity.gonogo import dry_run_session, go_no_go

        plan = make_plan(ctx, **options, dry=True)
        doc = dry_run(ctx, plan)
        with dry_run_session(ctx, "profile", f"profile-{req.engine or 'default'}-{req.workload}") as rd:
            ports = [_serve_shape(ctx, plan.npl).port] if plan.workload == "serve" else []
            doc["go_no_go"] = go_no_go(ctx, paths=dry_paths(ctx, plan), ports=ports)
            doc["run_dir"] = str(rd.path)
            rd.write_json("plan.json", doc)
        return doc
    make_plan(ctx, **options, dry=True)  # every check of the real plan, before the run dir
    with run_session(ctx, "profile", f"profile-{req.engine or 'default'}-{req.workload}"):
        session.prepare(ctx, [req.engine or _default_engine(ctx, req.workload)], [req.model or ctx.profile.serving.model])
        plan = make_plan(ctx, **options, out_dir=str(ctx.run.path / "profile"))
        doc = run_profile(ctx, plan, req.allow_env)
        return {"run_dir": str(ctx.run.path), **doc}


def step_engines(ctx, options: dict) -> list[str]:
    """The engine a profile step captures (the campaign builds it before its lock step)."""
    return [options.get("engine") or _default_engine(ctx, options.get("workload", "bench"))]


def campaign_step(ctx, options: dict) -> dict:
    """kind: profile -- options {engine, workload, ntg: [64, 16], npl, npp, model, graph_node: true, allow_collapsed, allow_env}."""
    known = {"engine", "workload", "ntg", "npl", "npp", "model", "graph_node", "allow_collapsed", "allow_env"}
    bad = set(options) - known
    if bad:
        raise UsageError(f"profile step: unknown option {sorted(bad)[0]} (known: {', '.join(sorted(known))})")
    out_dir = str(ctx.require_run().path / "profile")
    plan = make_plan(ctx, engine=options.get("engine"), workload=options.get("workload", "bench"), ntgs=options.get("ntg"), npl=options.get("npl"), npp=options.get("npp"),
                     model=options.get("model"), graph_node=options.get("graph_node", True), allow_collapsed=bool(options.get("allow_collapsed")), out_dir=out_dir)  # fmt: skip
    doc = run_profile(ctx, plan, options.get("allow_env", ()))
    return {"collapsed": doc["collapsed"], "files": doc["files"], "captures": [{"label": c["label"], "total_ms": c["total_ms"], "kernels": c["kernels"]} for c in doc["captures"]]}
