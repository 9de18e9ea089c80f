"""Graph-node nsys captures of a workload, one per ntg, then bucket analysis.

Decode runs as replayed CUDA graphs: a profile without --cuda-graph-trace=node
collapses each replay into one opaque launch (seed 000 section 3.4), so a
capture without it is refused unless --allow-collapsed asks for one, and then
the manifest and analysis.json say collapsed=true.

bench: nsys wraps llama-batched-bench -npp NPP -ntg NTG -npl NPL, once per ntg.
serve: nsys wraps the engine's server while the load generator sends NPL
requests of NPP prompt tokens and NTG generated tokens; the report is written
when the server is stopped.

--tracer cupti (or auto without a working nsys) loads parity's CUPTI injection library
into the workload instead of wrapping it (parity.tracer); its trace becomes an nsys-shaped
SQLite export, so the analysis is the same.  Every profile runs in blocks: each block runs
every arm (engine) traced at each ntg and once untraced at the longest ntg, so the tracer's
cost (traced/untraced S_TG) comes with its interval, and two arms give paired buckets.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from parity import session
from parity.engines import kind_of
from parity.engines.bound import Engine, bind
from parity.errors import InfraError, UsageError
from parity.options import check_step_options
from parity.bench import batched_bench
from parity.bench.batched_bench import argv as bench_argv
from parity.decode import replace
from parity.engines.envpolicy import check_bench_env
from parity.engines.server import serving
from parity.context import Run, dry_run_session, run_session
from parity.gonogo import go_no_go, refuse_missing
from parity.gpu.cuda_device import cuda_device, require_cuda_device
from parity.gpu.lock import effective_dir as lock_effective_dir
from parity.loadgen.client import Target, drive
from parity.loadgen.prompts import token_prompts
from parity.metrics.validity import check_request, reason
from parity.profiles import nsys as nsysmod
from parity.profiles.analysis import analyze_file, auto_differences, build_doc, write_outputs
from parity.profiles.buckets import ProfilingConfig, table_for
from parity.profiles.nsys import analysis_failure
from parity.stats.blocks import block_order
from parity.tracer import TRACERS
from parity.tracer.build import ensure_built, injection_env
from parity.tracer.locate import find_cupti
from parity.tracer.overhead import not_measured, tracer_overhead
from parity.tracer.pairs import from_captures
from parity.tracer.trace import convert, require_clean, trace_files

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
    tracer: str = "nsys"
    traced: bool = True  # False: the same workload without the tracer (its cost)
    block: int | None = None


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
    tracer: str = "nsys"
    tracer_choice: str = ""  # why this tracer (auto's reasoning)
    tracer_build: dict | None = None  # the CUPTI library: path, key, CUPTI source
    blocks: int = 1
    engines: list[str] = field(default_factory=list)  # the arms (one engine, or A and B for paired buckets)
    untraced: list[Capture] = field(default_factory=list)  # per arm: the longest ntg without the tracer
    device: str | None = None  # a dry plan's CUPTI tracer without a CUDA device here: why (the real run refuses it)
    bound: dict[str, Engine] = field(default_factory=dict)  # the arms' engines, resolved once
    settings: ProfilingConfig | None = None  # the profile's profiling section (timeouts, buckets, analysis options)
    shape: Any = None  # config.ServingConfig with parallel >= npl (serve: the server's port and timeouts)
    dry_model: str | None = None  # the model file the real run reads (session.dry_model_path; None: none)


def check_graph_node(graph_node: bool | None, allow_collapsed: bool) -> bool:
    """True when the capture is collapsed (allowed); raises the one-line refusal otherwise."""
    if graph_node:
        return False
    if allow_collapsed:
        return True
    raise UsageError(REFUSAL)


def make_plan(profile, runner, out, *, engine=None, workload="bench", ntgs=None, npl=None, npp=None, model=None, graph_node=None, allow_collapsed=False, out_dir="<run>/profile", dry=False,
              tracer=None, engines=None, blocks=None) -> ProfilePlan:  # fmt: skip
    """The captures of every arm (engines: paired buckets; else the one engine) at every ntg,
    one tracer for all, and per arm the untraced run that measures the tracer's cost."""
    arms = list(engines or [engine or None])
    if len(set(arms)) != len(arms):
        raise UsageError(f"--engines: an engine is listed twice ({', '.join(map(str, arms))})")
    blocks = profile.profiling.blocks if blocks is None else blocks  # 0 is refused, not read as the default
    if not isinstance(blocks, int) or isinstance(blocks, bool) or blocks < 1:
        raise UsageError(f"--blocks must be a positive integer, got {blocks!r}")
    for flag, v in (("--npl", npl), ("--npp", npp)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise UsageError(f"{flag} must be a positive integer, got {v!r}")
    plans = [_make_arm_plan(profile, runner, out, engine=a, workload=workload, ntgs=ntgs, npl=npl, npp=npp, model=model, graph_node=graph_node, allow_collapsed=allow_collapsed,
                            out_dir=out_dir, dry=dry, tracer=tracer, blocks=blocks) for a in arms]  # fmt: skip
    first = plans[0]
    for pl in plans[1:]:
        first.captures += pl.captures
        first.untraced += pl.untraced
    first.engines = [pl.engine for pl in plans]
    first.bound = {pl.engine: pl.bound[pl.engine] for pl in plans}
    first.device = plans[0].device
    first.dry_model = session.dry_model_path(profile, first.model, first.engine if workload == "serve" else None)
    return first


def choose_tracer(p, runner, wanted: str | None, dry: bool) -> tuple[str, str, str | None]:
    """(tracer, why, nsys binary or None) under the profiling section p.  auto: nsys where it is
    on PATH and `nsys --version` runs, else CUPTI (whose CUDA device make_plan checks, dry run or not)."""

    wanted = wanted or p.tracer
    if wanted not in TRACERS:
        raise UsageError(f"--tracer {wanted!r}: expected one of {', '.join(TRACERS)}")
    if wanted == "nsys":
        return "nsys", "asked for nsys", _nsys_binary(p.nsys, runner, dry)
    if wanted == "auto":
        name = p.nsys
        found = runner.which(name) if "/" not in name else (name if os.path.isfile(name) else None)
        if found:
            res = runner.run([found, "--version"], timeout=60)
            if res.ok:
                return "nsys", f"auto: {found} runs ({res.tail(1).strip()})", found
            why = f"auto: {found} --version failed (exit {res.rc}), so parity's CUPTI tracer"
        else:
            why = f"auto: nsys ({name}) is not on PATH, so parity's CUPTI tracer"
    else:
        why = "asked for cupti"
    return "cupti", why, None


def device_problem(runner) -> str | None:
    """Why the CUPTI tracer cannot run here (no CUDA device), else None: the same line for the dry
    run's NO GO and the real run's refusal."""
    try:
        require_cuda_device(runner)
    except UsageError as e:
        return str(e)
    return None


def _cupti_library(runner, out, cupti: str | None, dry: bool) -> dict:
    """Find CUPTI for the driver's CUDA and build the injection library (a dry run finds nothing)."""
    if dry:
        return {"library": "<built at the first real run: parity/tracer/cupti/parity_cupti.cpp against the CUPTI of the driver's CUDA>", "cached": False}

    dev = cuda_device(runner)
    found = find_cupti(dev["cuda"], runner, cupti)
    b = ensure_built(runner, found, out=out)
    return {"library": b.library, "key": b.key, "cupti": b.cupti, "compiler": b.compiler, "cached": b.cached, "driver_cuda": dev["cuda"], "gpus": dev["gpus"]}


def _make_arm_plan(profile, runner, out, *, engine=None, workload="bench", ntgs=None, npl=None, npp=None, model=None, graph_node=None, allow_collapsed=False, out_dir="<run>/profile", dry=False,
                   tracer=None, blocks=1) -> ProfilePlan:  # fmt: skip

    collapsed = check_graph_node(graph_node, allow_collapsed)
    if workload not in WORKLOADS:
        raise UsageError(f"--workload {workload!r}: expected one of {', '.join(WORKLOADS)}")
    p = profile.profiling
    engine = engine or _default_engine(profile, workload)
    eng = bind(profile, engine)
    e, kind = eng.section, eng.kind
    if workload == "bench" and not kind.binary_gates:
        raise UsageError(f"engine {engine} is {e.kind}: the bench workload runs llama-batched-bench; profile {e.kind} with --workload serve")
    if workload == "serve" and not kind.profiled_serving:
        raise UsageError(f"engine {engine} is {e.kind}: parity does not start its server, so it cannot run it under the profiler (profile it where it runs)")
    ntgs = list(ntgs or p.ntg)
    if len(set(ntgs)) != len(ntgs):
        raise UsageError(f"--ntg {ntgs}: values must differ")
    npl, npp = npl or p.npl, npp or p.npp
    model = model or profile.serving.model
    if not model:
        raise UsageError("no model to profile (serving.model or --model)")
    tracer, why, nsys_bin = choose_tracer(p, runner, tracer, dry)
    device = device_problem(runner) if tracer == "cupti" else None
    if device and not dry:
        raise UsageError(device)
    built = _cupti_library(runner, out, p.cupti, dry) if tracer == "cupti" else None
    shape, bench = _serve_shape(profile.serving, npl), profile.serving.bench
    # what does not depend on ntg: the model, the engine's binary, env, the server launch
    if workload == "bench":
        model_file, binary = _model_file(profile, model, dry), eng.tool_path("llama-batched-bench", runner, out, dry=dry)
        env, unset, server = eng.env(), [], None
    else:
        server = _serve_launch(eng, model, shape, out, dry)
        env, unset = server.env, server.unset
    captures, untraced = [], []
    for block in range(blocks):
        suffix = f"-b{block}" if blocks > 1 else ""
        for ntg in ntgs:
            label = f"{engine}-{workload}-ntg{ntg}{'-collapsed' if collapsed else ''}{suffix}"
            out_base = os.path.join(out_dir, label)
            wl = bench_argv(binary, model_file, [npp], [ntg], [npl], bench) if workload == "bench" else server.argv
            if tracer == "cupti":
                argv, cenv = list(wl), {**env, **injection_env(built["library"], out_base + ".cupti.%p.tsv")}
            else:
                argv, cenv = nsysmod.profile_argv(nsys_bin, out_base, wl, graph_node=not collapsed, trace=p.trace, extra=p.extra_args, fork=kind.forks), env
            captures.append(Capture(label, engine, ntg, out_base, argv, wl, cenv, unset, server, tracer=tracer, block=block if blocks > 1 else None))
        if workload == "bench":  # the tracer's cost: the longest ntg again, untraced
            ntg = max(ntgs)
            wl = bench_argv(binary, model_file, [npp], [ntg], [npl], bench)
            base = os.path.join(out_dir, f"{engine}-{workload}-ntg{ntg}-untraced{suffix}")
            untraced.append(Capture(f"{engine}-{workload}-ntg{ntg}-untraced{suffix}", engine, ntg, base, list(wl), wl, env, unset, None, tracer=tracer, traced=False, block=block))
    return ProfilePlan(engine, workload, model, ntgs, npl, npp, not collapsed, collapsed, captures, nsys_bin or "", tracer=tracer, tracer_choice=why, tracer_build=built,
                       blocks=blocks, engines=[engine], untraced=untraced, device=device, bound={engine: eng}, settings=p, shape=shape)  # fmt: skip


def _model_file(profile, model: str, dry: bool) -> str:
    """The model's file; a dry run on a workstation shows the configured path even when it is
    not there (the capture runs on the GPU box)."""
    try:
        return session.model_file(profile, model) if not dry else session.model_file_if_there(profile, model)
    except UsageError:
        if dry and model in profile.models and profile.models[model].path:
            return profile.models[model].path
        raise


def _default_engine(profile, workload: str) -> str:
    for name in profile.serving.engines or list(profile.engines):
        kind = kind_of(profile, name)
        if kind.binary_gates if workload == "bench" else kind.profiled_serving:
            return name
    raise UsageError(f"profile {profile.name}: no engine to profile (--engine)")


def _nsys_binary(name: str, runner, dry: bool) -> str:
    found = runner.which(name) if "/" not in name else (name if os.path.isfile(name) else None)
    if found:
        return found
    if dry:
        return name
    raise UsageError(f"nsys ({name}) not found on {runner.host}: install Nsight Systems or set profiling.nsys to its path")


def _serve_launch(eng: Engine, model: str, shape, out, dry: bool):
    # as in snapshot: --model names the served model, and a dry run builds nothing
    return eng.launch(eng.model_file(model), shape.port, shape, dry=dry, model=model, out=out)


def _serve_shape(serving, npl: int):
    return replace(serving, parallel=max(serving.parallel, npl))


def dry_run(plan: ProfilePlan, lock) -> dict:
    """The plan as the dry run prints it (lock: the profile's lock section)."""
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
        "tracer": plan.tracer,
        "tracer_choice": plan.tracer_choice,
        "tracer_build": plan.tracer_build,
        "blocks": plan.blocks,
        "engines": plan.engines,
        "commands": [{"label": c.label, "ntg": c.ntg, "block": c.block, "traced": c.traced, "argv": c.argv, "env": c.env, "unset": c.unset, "shell": " ".join(shlex.quote(a) for a in c.argv)}
                     for c in plan.captures + plan.untraced],  # fmt: skip
        "export": (f"{plan.nsys} export --type sqlite --output OUT.sqlite --force-overwrite true OUT.nsys-rep" if plan.tracer == "nsys"
                   else "the CUPTI trace files OUT.cupti.<pid>.tsv -> OUT.sqlite (nsys's tables, parity.tracer.trace.convert)"),  # fmt: skip
        "lock_dir": str(lock_effective_dir(lock)),
    }


def dry_paths(plan: ProfilePlan, runner) -> dict[str, str]:
    """What the real capture needs, for the go/no-go and the real run's first check (the same
    words): a CUDA device for CUPTI, nsys, each arm's workload binary, the model (a synth or hf
    model is made on the first real run: session.dry_model_path, snapshot's rule)."""
    paths = {}
    if plan.device:
        paths["CUDA device"] = f"<{plan.device}>"
    nsys = plan.nsys
    if plan.tracer == "nsys":
        paths["nsys"] = nsys if "/" in nsys else f"<nsys: {nsys!r} is not on PATH (profiling.nsys)>"
    for arm in plan.engines:
        exe = next(c.workload_argv for c in plan.captures if c.engine == arm)[0]
        found = exe if "/" in exe or exe.startswith("<") else runner.which(exe)
        paths[f"{os.path.basename(exe)} of {arm}"] = found or f"<{exe}: not on PATH>"
    if plan.dry_model is not None:
        paths[f"model {plan.model}"] = plan.dry_model
    return paths


def record_plan(run: Run, plan: ProfilePlan, policy, allow_env=()) -> None:
    """Before the builds: every capture's env against the policy, the plan in the manifest."""
    for c in plan.captures:
        check_bench_env(c.env, policy, allow_env, context=f"profile (engine {c.engine})")
    run.dir.update(collapsed=plan.collapsed, profile={"graph_node": plan.graph_node, "collapsed": plan.collapsed, "workload": plan.workload, "engine": plan.engine, "engines": plan.engines,
                                                 "tracer": plan.tracer, "tracer_choice": plan.tracer_choice, "tracer_build": plan.tracer_build, "blocks": plan.blocks,
                                                 "commands": [c.argv for c in plan.captures]})  # fmt: skip


def run_profile(run: Run, plan: ProfilePlan, locked) -> dict:
    """Blocks under the GPU lock (locked: session.measuring of the arms, prepared by the caller):
    each block runs every arm (ABBA order) traced at each ntg and untraced at the longest; export,
    bucket, difference per arm and block; the tracer's cost per arm; with two arms the paired
    bucket table.  Writes profile/*."""

    rd = run.dir
    table = table_for(plan.settings)
    captures, runs = [], []
    with locked:  # hardware.txt, builds.json, then the captures
        for block in range(plan.blocks):
            for arm in block_order(plan.engines, block, "abba"):
                for c in _block_sequence(plan, arm, block):
                    run.out.info(f"[profile] {c.label}: {'traced (' + plan.tracer + ')' if c.traced else 'untraced'}, {plan.workload}, ntg {c.ntg}, npl {plan.npl}")
                    if plan.workload == "bench":
                        rows = _capture_bench(run.runner, run.out, c, plan.settings.timeout_s)
                    else:
                        rows = _capture_serve(run, c, plan)
                    runs.append({"engine": c.engine, "block": c.block if c.block is not None else 0, "traced": c.traced, "ntg": c.ntg, "rows": rows,
                                 "s_tg": rows[0].get("s_tg") if len(rows) == 1 else None})  # fmt: skip
                    if c.traced:
                        cap = _analyze_capture(run.runner, c, plan, table)
                        cap["workload_rows"] = rows
                        captures.append(cap)
    if not plan.collapsed and any(c["collapsed"] for c in captures):  # the export says graph mode whatever was asked
        rd.update(collapsed=True)
    diffs = auto_differences(captures)
    doc = build_doc(captures, diff=diffs, bucket_table=table.source)
    doc["tracer"] = {"name": plan.tracer, "choice": plan.tracer_choice, "build": plan.tracer_build, "blocks": plan.blocks}
    doc["tracer_cost"] = _tracer_cost(plan, runs)
    if len(plan.engines) == 2:
        doc["paired_buckets"] = paired_from_captures(captures, diffs, plan.engines, table)
    files = write_outputs(rd.path / "profile", doc)
    rd.write_json("profile/tracer_cost.json", doc["tracer_cost"])
    files["tracer_cost"] = str(rd.path / "profile" / "tracer_cost.json")
    if doc.get("paired_buckets"):
        rd.write_json("profile/paired_buckets.json", doc["paired_buckets"])
        files["paired_buckets"] = str(rd.path / "profile" / "paired_buckets.json")
    return {**doc, "files": files}


def _block_sequence(plan: ProfilePlan, arm: str, block: int) -> list[Capture]:
    """One arm's runs in one block: its traced captures, and the untraced run first in even
    blocks and last in odd ones (so the tracer's cost is not read off a drift)."""
    traced = [c for c in plan.captures if c.engine == arm and (c.block or 0) == block]
    plain = [c for c in plan.untraced if c.engine == arm and c.block == block]
    return plain + traced if block % 2 == 0 else traced + plain


def _analyze_capture(runner, c: Capture, plan: ProfilePlan, table) -> dict:
    """The capture's SQLite export (nsys: exported from its report; CUPTI: converted from its
    trace files and refused when incomplete or collapsed), bucketed."""

    summary = None
    if c.tracer == "cupti":
        files = trace_files(c.out_base + ".cupti.%p.tsv")
        if not files:
            raise InfraError(f"the CUPTI tracer wrote no trace for {c.label} (expected {c.out_base}.cupti.<pid>.tsv; log {c.out_base}.log): was the library loaded (CUDA_INJECTION64_PATH)?")
        summary = convert(files, c.out_base + ".sqlite")
        require_clean(summary, allow_collapsed=plan.collapsed)
        src = c.out_base + ".sqlite"
    else:
        check_analysis(c.out_base + ".log")
        src = c.out_base + ".nsys-rep"
        if not os.path.isfile(src):
            raise InfraError(f"nsys wrote no report at {src} (log: {c.out_base}.log)")
    cap = analyze_file(src, table, label=c.label, engine=c.engine, ntg=c.ntg, npl=plan.npl, top_unmatched=plan.settings.top_unmatched,
                       after_nvtx=plan.settings.decode_after_nvtx, runner=runner, nsys=plan.nsys or "nsys", collapsed=plan.collapsed)  # fmt: skip
    cap["command"] = c.argv
    cap["block"] = c.block
    cap["tracer"] = c.tracer
    if summary is not None:
        cap["trace"] = {k: summary[k] for k in ("kernels", "graph_kernels", "graph_node_kernels", "graph_launches_seen", "graph_launches_traced", "node_check", "graphs", "graph_trace_mode")}
        cap["trace"]["processes"] = [{k: p[k] for k in ("pid", "path", "complete", "dropped", "buffers_requested", "buffers_refused", "counted", "cupti_version")} for p in summary["processes"]]
    return cap


def _tracer_cost(plan: ProfilePlan, runs: list[dict]) -> list[dict]:
    if plan.workload != "bench":
        return not_measured(plan.engines, plan.tracer, "measured on the bench workload only (a serve capture has no untraced twin with the same load)")
    longest = max(plan.ntgs)
    return tracer_overhead([r for r in runs if r["ntg"] == longest], plan.tracer)


def paired_from_captures(captures: list[dict], diffs: list[dict], engines: list[str], table) -> dict:
    """The paired bucket table of two arms from per-block differences (reference: the second arm,
    as the bench A/B takes the last engine as A)."""
    return from_captures(captures, diffs, engines[1], engines[0], order=list(table.order()))


def check_analysis(log_path: str) -> None:
    """nsys exits 0 when its own analysis failed (seen on an H100: an nsys older than the CUDA
    runtime); the report it leaves lacks the kernel table, which is not the capture flags' fault."""

    try:
        text = open(log_path, errors="replace").read()
    except OSError:
        return
    why = analysis_failure(text)
    if why:
        raise InfraError(f"nsys exited 0 but its analysis failed ({why}; log {log_path}): the report is incomplete. "
                         "This nsys cannot post-process this CUDA runtime: use an Nsight Systems at least as new as the CUDA toolkit")  # fmt: skip


def _capture_bench(runner, out, c: Capture, timeout_s: float) -> list[dict]:
    """Run nsys around llama-batched-bench; returns the bench table rows (maybe empty, see below)."""

    os.makedirs(os.path.dirname(c.out_base), exist_ok=True)
    res = runner.run(c.argv, env=c.env, unset=c.unset, timeout=timeout_s)
    text = res.stdout + "\n" + res.stderr
    with open(c.out_base + ".log", "w") as f:
        f.write(text)
    rows = batched_bench.parse(res.stdout)
    why = batched_bench.failure(text)
    if res.timed_out or res.rc != 0 or why or len(rows) > 1:
        detail = why or (f"timed out after {timeout_s:.0f} s" if res.timed_out else f"exit {res.rc}")
        raise InfraError(f"profiled llama-batched-bench failed ({len(rows)} table rows): {detail}; log {c.out_base}.log: {res.tail(3)}")
    if not rows:
        # llama.cpp's common_log singleton is leaked on purpose (upstream issue 22142): its worker
        # thread can die at exit before printing the last lines.  A failed decode exits non-zero,
        # so exit 0 without the row is a lost log line, not a failed workload: the profile stands.
        out.warn(f"{c.label}: llama-batched-bench exited 0 but its table row was lost at exit (llama.cpp common_log); the capture is kept")
    return rows


def _capture_serve(run: Run, c: Capture, plan: ProfilePlan) -> list[dict]:
    import asyncio

    e = plan.bound[c.engine].section
    s = plan.shape
    base = c.server
    la = replace(base, argv=c.argv, env=c.env)  # the nsys-wrapped command (or the CUPTI env); readiness, model check, names as launched
    os.makedirs(os.path.dirname(c.out_base), exist_ok=True)
    # nsys writes the report after the server stops: give it time before SIGKILL.  The stop
    # signal goes to nsys alone: it ends the server itself (its --kill: SIGTERM), and a second
    # signal sends llama-server down its "terminating immediately" exit(1), which hung at exit
    # here (a busy 2-core box) until the SIGKILL, so nsys wrote no report
    with serving(run, la, s.port, c.out_base + ".log", e.ready_timeout_s * 2, e.ready_probe_timeout_s, e.stop_grace_s + 120, leader_only=True):
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
    tracer: str | None = None  # auto | cupti | nsys (None: profiling.tracer)
    engines: list[str] | None = None  # two arms: paired buckets (B/A over blocks)
    blocks: int | None = None  # None: profiling.blocks


def profile(ctx, req: ProfileRequest) -> dict:
    """`parity profile`: the dry-run commands, or captures + analysis in a new run directory."""

    check_graph_node(req.graph_node, req.allow_collapsed)
    for name, v in (("--npl", req.npl), ("--npp", req.npp)):
        if v is not None and v <= 0:
            raise UsageError(f"{name} must be positive")
    if req.engines is not None and len(req.engines) != 2:
        raise UsageError(f"--engines takes two arms for paired buckets (A,B), got {len(req.engines)}: {','.join(req.engines)}")
    if req.engines and req.engine:
        raise UsageError("give --engine (one arm) or --engines A,B (paired buckets), not both")
    options = dict(engine=req.engine, workload=req.workload, ntgs=req.ntgs, npl=req.npl, npp=req.npp, model=req.model, graph_node=req.graph_node, allow_collapsed=req.allow_collapsed,
                   tracer=req.tracer, engines=req.engines, blocks=req.blocks)  # fmt: skip
    # the planner, the real run's first step too: every check, the tracer's device and the files
    # it needs, so a dry run and a real run cannot disagree
    plan = make_plan(ctx.profile, ctx.runner, ctx.out, **options, dry=True)
    if req.dry_run:  # a go/no-go with its evidence in a `dry-run` run dir; the CLI exits with its code
        doc = dry_run(plan, ctx.profile.lock)
        with dry_run_session(ctx, "profile", f"profile-{req.engine or 'default'}-{req.workload}") as rd:
            ports = [plan.shape.port] if plan.workload == "serve" else []
            doc["go_no_go"] = go_no_go(ctx.as_run(), ctx.profile.lock, ctx.profile.hardware_class,
                                       paths=dry_paths(plan, ctx.runner), ports=ports)
            doc["run_dir"] = str(rd.path)
            rd.write_json("plan.json", doc)
        return doc
    refuse_missing(ctx.runner, dry_paths(plan, ctx.runner))  # the dry run's NO GO paths, refused before the run dir
    with run_session(ctx, "profile", f"profile-{req.engine or 'default'}-{req.workload}"):
        session.prepare(ctx, plan.engines, [plan.model])
        plan = make_plan(ctx.profile, ctx.runner, ctx.out, **options, out_dir=str(ctx.run.path / "profile"))
        record_plan(ctx.as_run(), plan, ctx.profile.policy, req.allow_env)
        session.prepare(ctx, plan.engines, [plan.model])  # before the lock (make_plan found or built it already)
        doc = run_profile(ctx.as_run(), plan, session.measuring(ctx, plan.engines))
        return {"run_dir": str(ctx.run.path), **doc}


def step_engines(profile, options: dict) -> list[str]:
    """The engine a profile step captures (the campaign builds it before its lock step)."""
    return list(options.get("engines") or [options.get("engine") or _default_engine(profile, options.get("workload", "bench"))])


STEP_OPTIONS = {"engine", "workload", "ntg", "npl", "npp", "model", "graph_node", "allow_collapsed", "allow_env", "tracer", "engines", "blocks"}


def check_step(profile, runner, out, options: dict) -> ProfilePlan:
    """A profile step's options, checked as the real step plans them (a dry plan: nothing is built)."""
    check_step_options("profile", options, STEP_OPTIONS)
    plan = make_plan(profile, runner, out, engine=options.get("engine"), workload=options.get("workload", "bench"), ntgs=options.get("ntg"), npl=options.get("npl"), npp=options.get("npp"),
                     model=options.get("model"), graph_node=options.get("graph_node", True), allow_collapsed=bool(options.get("allow_collapsed")),
                     tracer=options.get("tracer"), engines=options.get("engines"), blocks=options.get("blocks"), dry=True)  # fmt: skip
    if plan.device:  # the step's real plan refuses it: the campaign does too, dry run or not, before its first step
        raise UsageError(plan.device)
    return plan


def campaign_step(ctx, options: dict) -> dict:
    """kind: profile -- options {engine, workload, ntg: [64, 16], npl, npp, model, graph_node: true, allow_collapsed, allow_env}."""
    check_step(ctx.profile, ctx.runner, ctx.out, options)
    out_dir = str(ctx.require_run().path / "profile")
    plan = make_plan(ctx.profile, ctx.runner, ctx.out, engine=options.get("engine"), workload=options.get("workload", "bench"), ntgs=options.get("ntg"), npl=options.get("npl"), npp=options.get("npp"),
                     model=options.get("model"), graph_node=options.get("graph_node", True), allow_collapsed=bool(options.get("allow_collapsed")), out_dir=out_dir,
                     tracer=options.get("tracer"), engines=options.get("engines"), blocks=options.get("blocks"))  # fmt: skip
    record_plan(ctx.as_run(), plan, ctx.profile.policy, options.get("allow_env", ()))
    session.prepare(ctx, plan.engines, [plan.model])  # before the lock (make_plan found or built it already)
    doc = run_profile(ctx.as_run(), plan, session.measuring(ctx, plan.engines))
    return {"collapsed": doc["collapsed"], "files": doc["files"], "captures": [{"label": c["label"], "total_ms": c["total_ms"], "kernels": c["kernels"]} for c in doc["captures"]]}
