"""`parity gate` and the campaign's gate step: check a request, run the gate set in a measurement
session (prepared, then under the GPU lock), record canonical md5s."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from parity import session
from parity.artifacts import RunDir
from parity.context import dry_run_session, run_session
from parity.errors import GateFailed, UsageError
from parity.gates.base import GateInputs, gate_inputs, gate_set_engine
from parity.gates.prepost import GateSpec, gate_engines, run_gate_set, spec_from_options, wanted_kinds
from parity.gates.prepost import check_plan, write_summary
from parity.gonogo import go_no_go
from parity.gpu.lock import effective_dir
from parity.gates import known_md5
from parity.gates.canonical import CanonicalMd5
from parity.gates.kl import sweep_contexts, sweep_rows
from parity.gates.completion import usable_md5


@dataclass
class GateRequest:
    """What `parity gate` asks for; None keeps the profile's gates settings."""

    model: str | None = None
    path: str | None = None
    ops: list[str] | None = None  # ['none'] runs no op check
    backend: str | None = None
    kl: bool = False
    engine: str | None = None
    expect: str | None = None
    form: str | None = None
    record: bool = False
    registry: str | None = None
    dry_run: bool = False
    kl_sweep: list[str] | None = None  # the KL drift sweep's contexts ("256", "1024", ...)


def _validate(inputs: GateInputs, model, path, engine, expect, form, ops) -> None:
    if expect and not usable_md5(expect):
        raise UsageError(f"--expect {expect!r}: not the md5 of a non-empty output (32 lowercase hex digits)")
    if form and form not in ("chat", "no-cnv"):
        raise UsageError(f"--form {form!r}: expected chat or no-cnv")
    if model and model not in inputs.models and not Path(model).expanduser().is_file():
        known = ", ".join(inputs.models)
        raise UsageError(f"--model {model!r}: neither a model of profile {inputs.profile} ({known}) nor a file")
    eng = engine or inputs.gates.engine
    if eng:
        e = inputs.engine(eng).section
        if path and path != "all" and e.paths and path not in e.paths:
            raise UsageError(f"--path {path!r}: engine {eng} has paths {', '.join(e.paths)} (or all)")
    if ops is not None and not ops:
        raise UsageError("--ops: give OP,OP,... or none")


def _record(rd: RunDir, n_predict: int, result: dict, form: str, registry_file: str | None) -> list[str]:
    """Record each produced md5 whose (model, path) has a green KL check; refuse otherwise
    (n_predict: gates.n_predict)."""

    md5s = [c for c in result["checks"] if c["kind"] == "md5" and (c["status"] in ("pass", "fail") or c["data"].get("no_expectation"))]
    if not md5s:
        raise UsageError("--record: no md5 was produced to record (every md5 check errored)")
    written = []
    for c in md5s:
        judged = c["data"].get("kl") if c["data"].get("md5_changed") and c["status"] == "pass" else None  # KL within band
        kl = next((k for k in result["checks"] if k["kind"] == "kl" and k["status"] == "pass" and k["path"] == c["path"]
                   and k["model"] == c["model"] and not k["data"].get("sweep")), judged)  # fmt: skip
        if kl is None:
            raise GateFailed(
                f"refusing to record {c['got']} for {c['model']}/{c['path']}: no green KL check with candidate {c['model']} on path {c['path']} "
                f"(run with --kl; gates.kl.candidate must be {c['model']})"
            )
        validated = f"{kl['detail']} (parity gate --record, run {rd.run_id})"
        entry = CanonicalMd5(c["got"], c["path"] or "default", form, n_predict, validated)
        transcript = (rd.path / c["data"]["transcript"]).read_bytes() if c["data"].get("transcript") else None
        written.append(str(known_md5.record(c["model"], entry, True, transcript, registry_file)))
    return written


def gate(ctx, req: GateRequest) -> dict:
    """The gate set in a new run directory; the run is marked invalid unless green."""
    op_list = req.ops
    inputs = gate_inputs(ctx.profile, req.registry)  # the plan: every engine bound once
    _validate(inputs, req.model, req.path, req.engine, req.expect, req.form, op_list)
    if op_list == ["none"]:
        op_list = []
    if req.kl_sweep is not None and not req.kl_sweep:
        raise UsageError("--kl-sweep: give the contexts, e.g. 256,1024,2048,4096")
    spec = GateSpec.from_profile(
        ctx.profile,
        models=[req.model] if req.model else None,
        paths=[req.path] if req.path else None,
        ops=op_list,
        kl=req.kl or None,
        engine=req.engine,
        expect=req.expect,
        form=req.form,
        backend=req.backend,
        kl_sweep=sweep_contexts(req.kl_sweep, "--kl-sweep") or None,
    )
    gate_engines(inputs, spec)  # an engine the gates cannot run (an endpoint): refused before the run dir, dry run or not
    wanted_kinds(spec)  # nothing to check: refused before the run directory, dry run or not
    slug = f"gate-{Path(req.model).stem if req.model else 'default'}"
    if req.dry_run:
        if req.record:
            raise UsageError("--record writes the registry: it takes a real run, not --dry-run")
        doc = dry_plan(inputs, spec, ctx.runner, ctx.out, ctx.profile.lock)
        with dry_run_session(ctx, "gate", slug) as rd:
            doc["go_no_go"] = go_no_go(ctx.as_run(), ctx.profile.lock, ctx.profile.hardware_class, paths=doc["files"])
            doc["run_dir"] = str(rd.path)
            rd.write_json("plan.json", doc)
        return doc
    with run_session(ctx, "gate", slug):
        session.prepare(ctx, gates=spec)  # every build and model first, before the lock and any check
        with session.locked(ctx):  # the gates run llama-completion, test-backend-ops and KL on the GPU
            result = run_gate_set(inputs, ctx.as_run(), spec, "gate")
        write_summary(inputs, ctx.run, {"gate": result})
        recorded, record_error = [], None
        if req.record:
            try:
                recorded = _record(ctx.run, inputs.gates.n_predict, result, req.form or inputs.gates.form, req.registry)
            except GateFailed as e:
                record_error = str(e)
        # a recorded proposal settles the md5 checks that had no expectation yet
        unsettled = [c["check"] for c in result["checks"] if c["status"] in ("fail", "error") and not (recorded and c["data"].get("no_expectation"))]
        green = not unsettled and result["status"] != "not-run" and not record_error
        if not green:
            ctx.run.mark_invalid(f"gate not green: {', '.join(unsettled) or record_error or result['status']}")
        return {
            "run_dir": str(ctx.run.path),
            "status": result["status"],
            "green": green,
            "checks": result["checks"],
            "recorded": recorded,
            "record_error": record_error,
            **({"kl_sweep": sweep_rows(result["checks"], spec.kl_sweep)} if spec.kl_sweep else {}),
        }


def dry_plan(inputs: GateInputs, spec: GateSpec, runner, out, lock_cfg) -> dict:
    """The gate set the real run would run -- each check's commands, env and what it is held to,
    the engines it builds, the lock (lock_cfg: the profile's lock section) -- and the files its
    go / no-go checks (binaries, models, the KL text).  Nothing is built or made."""
    engine = gate_set_engine(inputs.gates, spec)
    checks, files = [], {}
    for k in wanted_kinds(spec):
        for t in k.expand(inputs, spec, engine):
            d = k.dry(inputs, runner, out, spec, t)
            files.update(d["files"])
            checks.append({"kind": k.name, "check": k.label(t).strip(), "engine": t.engine, "model": t.model,
                           "path": t.path, "op": t.op, "expected": d["expected"],
                           "commands": d["commands"]})  # fmt: skip
    return {"dry_run": True, "engine": engine, "engines": gate_engines(inputs, spec), "checks": checks,
            "files": files, "lock": str(effective_dir(lock_cfg))}  # fmt: skip


def step_engines(profile, options: dict) -> list[str]:
    """The engines a gate step will run (the campaign builds them before its lock step)."""
    _, over = spec_from_options(dict(options))
    return gate_engines(gate_inputs(profile), GateSpec.from_profile(profile, **over))


def check_spec(inputs: GateInputs, spec: GateSpec) -> None:
    """The gate set names models and engines that exist (before anything is built)."""
    for m in spec.models:
        if m not in inputs.models and not Path(m).expanduser().is_file():
            known = ", ".join(inputs.models) or "none"
            raise UsageError(f"gate models: {m!r} is neither a model of profile {inputs.profile} ({known}) nor a file")
    for e in [spec.engine, *spec.engines]:
        if e:
            inputs.engine(e)
    check_plan(inputs.gates, spec)  # e.g. the KL text long enough for every context it runs at


def check_step(profile, options: dict) -> GateSpec:
    """A gate step's options, checked before any step runs."""
    _, over = spec_from_options(dict(options))
    spec = GateSpec.from_profile(profile, **over)
    check_spec(gate_inputs(profile), spec)
    return spec


def campaign_step(ctx, options: dict) -> dict:
    """kind: gate -- options {phase: pre|post|<name>, models, paths, ops, kl, engine, engines, expect, form, backend}."""
    phase, over = spec_from_options(options)
    result = session.gate_phase(ctx, phase, GateSpec.from_profile(ctx.profile, **over))
    return {"phase": phase, "status": result["status"], "checks": [{k: c[k] for k in ("check", "expected", "got", "status")} for c in result["checks"]]}
