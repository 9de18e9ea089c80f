"""One measurement session, written once for every command that measures (snapshot, bench,
bench A/B, lever A/B, profile, gate, bisection probes, campaign lock steps):

    prepare(ctx, engines, models)   builds, installs and model files, BEFORE the lock
    with measuring(ctx, engines, gates=spec):
        ...                         under the GPU lock: hardware.txt, builds.json, pre-gates,
                                    the body, post-gates (also after a failing body)
    measured(ctx, engines, body)    both, the body a function of the run's values (context.Run)

This module is the one place measurement code takes the GPU lock (locked()); a build, a model
synthesis or an install started while it is held is refused (parity.gpu.held.refuse_while_held).
The run directory's lifecycle (manifest end state, interrupts, children stopped) is
parity.context.run_session's."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from parity.context import Run
from parity.engines import kind_of
from parity.engines.bound import bind
from parity.errors import GateFailed, UsageError
from parity.gates import prepost
from parity.gates.base import GateInputs, gate_inputs as bind_gates
from parity.gonogo import LATER, refuse_missing
from parity.gpu import lock as gpulock
from parity.gpu.hardware import every_gpu_seen, write_hardware
from parity.models.synth import ensure_model
from parity.options import check_step_options, positive_seconds

T = TypeVar("T")


def prepare(ctx, engines=(), models=(), gates: prepost.GateSpec | None = None) -> dict[str, dict]:
    """Every engine's build or install and every model file, before the GPU lock.
    models: profile model names or files; with `gates`, the gate set's engines and models too.
    {engine: its builds.json row}."""
    names = list(engines)
    wanted = list(models)
    if gates is not None:
        names += prepost.gate_engines(gate_inputs(ctx), gates)
        wanted += prepost.gate_models(ctx.profile.gates, gates)
    done = {}
    for name in dict.fromkeys(n for n in names if n):
        done[name] = bind(ctx.profile, name).provision(ctx.runner, ctx.out)
    for m in dict.fromkeys(x for x in wanted if x):
        model_file(ctx.profile, m)
    return done


def check_model(profile, model: str | None) -> None:
    """The model a command names is a model of the profile or a file (UsageError otherwise);
    nothing is made here (prepare() makes it)."""
    if not model:
        raise UsageError("no model (serving.model or --model)")
    if model not in profile.models and not Path(model).expanduser().is_file():
        raise UsageError(f"--model {model!r}: neither a model of profile {profile.name} ({', '.join(profile.models) or 'none'}) nor a file")


def model_file(profile, model: str) -> str:
    """A profile model's file (synthesized or converted when missing: before the lock only), or a
    file named directly."""
    if model in profile.models:
        return ensure_model(profile, model)
    p = Path(model).expanduser()
    if p.is_file():
        return str(p)
    known = ", ".join(profile.models) or "none"
    raise UsageError(f"model {model!r}: neither a model of profile {profile.name} ({known}) nor a file")


def dry_model_path(profile, model: str, engine: str | None = None) -> str | None:
    """The one model-file rule of every dry run (snapshot, profile, campaign): the file the real
    run will read, a placeholder when the real run makes it first (a synth or hf model: prepare()
    makes it before the lock), None when nothing is read (an endpoint; a checkpoint vLLM checks
    itself).  engine None: a GGUF read by a llama.cpp tool."""
    source = kind_of(profile, engine).model_source if engine else "gguf"
    m = profile.models.get(model)
    if source is None or (m is not None and m.synth is None and m.hf is None and source == "checkpoint"):
        return None
    if m is not None and (m.synth is not None or m.hf is not None):
        return f"<model {model}: made {LATER}>"
    return str(Path(m.path if m is not None else model).expanduser())


def check_served_model(ctx, engine: str, model: str) -> None:
    """What a dry run can tell of the model the engine will serve (UsageError: the real run stops)."""
    path = dry_model_path(ctx.profile, model, engine)
    if path is None or path.startswith("<") or Path(path).is_file():
        return
    m = ctx.profile.models.get(model)
    if m is not None:
        raise UsageError(f"model {model}: file not found: {path}")
    raise UsageError(f"model {model!r}: neither a model of profile {ctx.profile.name} nor a file")


def served_model_problem(ctx, engine: str, model: str) -> str | None:
    """Why the engine's model cannot be served yet (a dry run shows it; the real run stops), None: fine."""
    try:
        check_served_model(ctx, engine, model)
    except UsageError as e:
        return str(e)
    return None


def engine_paths(ctx, engines) -> dict[str, str]:
    """{what: path or placeholder} of the programs the engines run (their kinds' dry_paths: a
    binary, an endpoint's start and stop commands): the dry run's go/no-go checks them, and
    refuse_missing_programs() refuses the real run on the same ones."""
    paths: dict[str, str] = {}
    for name in dict.fromkeys(e for e in engines if e):
        paths.update(bind(ctx.profile, name).dry_paths(ctx.runner))
    return paths


def refuse_missing_programs(ctx, engines) -> None:
    """The real run's first check of its engines, before its run dir, lock or build: what the dry
    run calls missing (a start command that does not exist) is refused here, in its words (exit 2)."""
    refuse_missing(ctx.runner, engine_paths(ctx, engines))


def serve_model(ctx, engine: str, model: str) -> None:
    """Before the lock: the file (or checkpoint) the engine will serve exists, made when the
    profile says how (a synth or hf model)."""
    source = kind_of(ctx.profile, engine).model_source
    m = ctx.profile.models.get(model)
    if source == "gguf" or (source == "checkpoint" and m is not None and m.hf is not None):
        model_file(ctx.profile, model)


def model_file_if_there(profile, model: str) -> str:
    """A dry run's model file: the profile's path even when it is not made yet (never synthesizes)."""
    m = profile.models.get(model)
    if m is not None and m.path:
        return m.path
    return model_file(profile, model)


@contextmanager
def locked(ctx, timeout: float | None = None, break_stale: bool = False, gpus=()) -> Iterator:
    """The GPU lock for this context, re-entrant: a caller that holds it keeps it.  gpus: the GPU
    indices the run uses (a crossover's), named in the owner record."""
    if ctx.vars.get("_gpu_lock") is not None:
        yield ctx.vars["_gpu_lock"]
        return
    with gpulock.held_lock(ctx.profile.lock, ctx.runner, ctx.out, ctx.run, ctx.run_id, ctx.artifacts_root,
                           timeout, break_stale, gpus=gpus) as lk:
        ctx.vars["_gpu_lock"] = lk
        try:
            yield lk
        finally:
            ctx.vars.pop("_gpu_lock", None)


def check_lock_step(ctx, options: dict) -> float | None:
    """A lock step's options, checked before any step runs: its timeout (None: lock.timeout_s)."""
    check_step_options("lock", options, {"timeout_s", "break_stale"})
    return positive_seconds(options["timeout_s"], "lock step with.timeout_s") if options.get("timeout_s") is not None else None


def lock_step(ctx, options: dict) -> dict:
    """Campaign step kind: lock -- take the GPU lock for the rest of the campaign (released when
    it ends; the campaign prepares what the steps after it need before this step runs)."""
    timeout = check_lock_step(ctx, options)
    lock = ctx.cleanup.enter_context(locked(ctx, timeout, bool(options.get("break_stale"))))
    return {"owner": lock.record, "dir": str(lock.dir), "inherited": lock.inherited}


def builds_json(ctx, engines) -> dict:
    """builds.json in the run dir: each engine's provenance row, as its kind states it."""
    data = {name: bind(ctx.profile, name).provenance(ctx.runner, ctx.out) for name in dict.fromkeys(engines)}
    if ctx.run:
        try:
            data = {**(ctx.run.read_json("builds.json") or {}), **data}
        except (OSError, ValueError):
            pass
        ctx.run.write_json("builds.json", data)
    return data


@contextmanager
def measuring(ctx, engines=(), gates: prepost.GateSpec | None = None, hardware: bool = True, gpus=()) -> Iterator[dict]:
    """Under the GPU lock (gpus: the indices it names, locked()): hardware.txt (before any server starts),
    builds.json, the pre-gates (gates=None: none), the body, the post-gates.  Yields the hardware
    inventory ({} without a run)."""
    with locked(ctx, gpus=gpus):
        hw = {}
        if hardware and ctx.run is not None:
            hw = write_hardware(ctx.runner, ctx.out, ctx.run, ctx.profile.hardware_class)
            if note := spread_over_gpus(ctx, engines, hw, placed=bool(gpus)):
                ctx.out.warn(note)
        if engines:
            builds_json(ctx, engines)
        with gated(ctx, gates, enabled=gates is not None):
            yield hw


def spread_over_gpus(ctx, engines, hw: dict, placed: bool) -> str | None:
    """every_gpu_seen for these engines' servers (those on a GPU) in this session."""
    bound = [bind(ctx.profile, e) for e in engines]
    if not any(eng.on_gpu for eng in bound):
        return None
    own = [eng.name for eng in bound if "CUDA_VISIBLE_DEVICES" in eng.env()]
    local = getattr(ctx.runner, "host", "local") == "local"
    return every_gpu_seen(hw, placed, local, os.environ.get("CUDA_VISIBLE_DEVICES"), own)


def measured(ctx, engines, body: Callable[[Run], T], gates: prepost.GateSpec | None = None, serve: str | None = None,
             gpus=()) -> T:
    """A measurement whose body takes values: the engines' builds and installs, the gate set's and
    the served model (serve: a model each engine serves, made as serve_model() says) before the
    lock, then body(run) under measuring() (gpus: the GPU indices the lock's record names); body's result."""
    prepare(ctx, engines, gates=gates)
    for e in engines if serve else ():
        serve_model(ctx, e, serve)
    with measuring(ctx, engines, gates=gates, gpus=gpus):
        return body(ctx.as_run())


def gate_inputs(ctx) -> GateInputs:
    """What the gate kinds read in this session: its profile's engines bound, and the md5 reference
    runs its gate phases share."""
    return bind_gates(ctx.profile, references=ctx.vars.setdefault("_gate_reference_runs", {}))


@contextmanager
def gated(ctx, spec: prepost.GateSpec | None = None, enabled: bool = True):
    """Pre-gates, the body, post-gates (also after a failing body, not after an interrupt),
    all under one hold of the GPU lock."""
    if not enabled:
        yield
        return
    spec = spec or prepost.GateSpec.from_profile(ctx.profile)
    prepare(ctx, gates=spec)  # a cache hit when the caller prepared (it must have, when it holds the lock)
    with locked(ctx):
        inputs, run = gate_inputs(ctx), ctx.as_run()
        prepost.run_phase(inputs, run, "pre", spec)
        try:
            yield
        except KeyboardInterrupt:
            raise
        except BaseException:
            try:
                prepost.run_phase(inputs, run, "post", spec)
            except GateFailed:
                pass
            raise
        prepost.run_phase(inputs, run, "post", spec)


def gate_phase(ctx, phase: str, spec: prepost.GateSpec | None = None) -> dict:
    """One gate phase on its own (a campaign's gate step, `parity gate`), its builds and models
    prepared first, then run under the lock."""
    spec = spec or prepost.GateSpec.from_profile(ctx.profile)
    prepare(ctx, gates=spec)
    with locked(ctx):
        return prepost.run_phase(gate_inputs(ctx), ctx.as_run(), phase, spec)
