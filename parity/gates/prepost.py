"""Gate sets and the pre/post wrapper every benchmark runs inside.

parity.session.gated runs the gate set before (a red pre-gate stops the
benchmark), runs the body, runs it again after, and writes gates.json,
gate_summary.tsv in the users' layout (phase check status actual expected
details, parity.gates.summary) and gate_checks.tsv (parity's: phase check
expected got status).  A red post-gate marks the run invalid: its numbers do
not count.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from parity.engines import kind_of
from parity.errors import ConfigError, GateFailed
from parity.gates.checks import FAIL, PASS, Check, overall
from parity.gates.run import kl_gate, md5_gate, op_gate
from parity.options import check_step_options
from parity.errors import UsageError
from parity.gates import summary


@dataclass
class GateSpec:
    models: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)
    kl: bool = False
    engine: str | None = None
    expect: str | None = None
    form: str | None = None
    backend: str | None = None
    engines: list[str] = field(default_factory=list)  # md5 on several builds (default: [engine])

    @classmethod
    def from_profile(cls, profile, **over) -> "GateSpec":
        g = profile.gates
        spec = cls(list(g.models), list(g.paths), list(g.ops), g.kl_in_prepost, g.engine)
        for k, v in over.items():
            if v is not None:
                setattr(spec, k, v)
        return spec


def gate_engines(ctx, spec: GateSpec | None = None) -> list[str]:
    """The engines whose binaries this gate set runs, once each: the gated builds and the
    reference build (md5), the gate engine (op-oracle, KL).  Build them before the GPU lock."""
    g = ctx.profile.gates
    spec = spec or GateSpec.from_profile(ctx.profile)
    engine = spec.engine or g.engine or next(iter(ctx.profile.engines), None)
    names: list[str | None] = []
    if spec.models:
        names += spec.engines or [engine]
        if g.reference_engine and not spec.expect:
            names.append(g.reference_engine)
    if spec.ops or spec.kl:
        names.append(engine)
    names = [n for n in dict.fromkeys(names) if n]
    for n in names:
        if n in ctx.profile.engines and (note := kind_of(ctx.profile, n).binary_gates_note()):
            raise UsageError(f"gates on engine {n}: the gates run an engine's own binaries, {note}")
    return names


def binary_gates(ctx, engines, spec: GateSpec | None) -> dict[str, dict]:
    """Per engine of a measurement, whether the binary gates (md5, op-oracle, KL) ran on its own
    binaries: {"status": gated | not run | not applicable, "why"} (not applicable: as its kind says)."""
    g = ctx.profile.gates
    out = {}
    for e in engines:
        note = kind_of(ctx.profile, e).binary_gates_note()
        if note:
            out[e] = {"status": "not applicable", "why": note}
            continue
        if spec is None:
            out[e] = {"status": "not run", "why": "ungated run (--no-gates)"}
            continue
        engine = spec.engine or g.engine or next(iter(ctx.profile.engines), None)
        ran = []
        if spec.models and e in (spec.engines or [engine]):
            ran.append(f"md5 of {', '.join(spec.models)}")
        elif spec.models and not spec.expect and e == g.reference_engine:
            ran.append("the md5 reference")
        if e == engine:
            ran += [f"op-oracle {', '.join(spec.ops)}"] * bool(spec.ops) + ["KL band"] * bool(spec.kl)
        covered = gate_engines(ctx, spec)
        out[e] = {"status": "gated", "why": "pre and post: " + "; ".join(ran)} if ran else {"status": "not run", "why": f"the gate set runs on {', '.join(covered) or 'no engine'} (gates.engine, gates.reference_engine)"}
    return out


def gate_models(ctx, spec: GateSpec) -> list[str]:
    """The model files this gate set reads (md5 models, the KL models): prepared before the lock."""
    kl = ctx.profile.gates.kl
    return [m for m in dict.fromkeys([*spec.models, *((kl.reference, kl.candidate, kl.baseline) if spec.kl else ())]) if m]


def _paths(ctx, spec: GateSpec, engine: str | None) -> list[str | None]:
    e = ctx.profile.engine(engine) if engine else None
    paths = spec.paths or ([e.default_path] if e and e.default_path else [None])
    if "all" in paths:
        paths = list(e.paths) if e and e.paths else [None]
    return paths


def _engine_paths(ctx, engine: str, wanted: list[str]) -> list[str | None]:
    """The requested paths this engine has; else its default path (stock has no paged path)."""
    e = ctx.profile.engine(engine)
    if "all" in wanted:
        return list(e.paths) or [e.default_path]
    return [p for p in wanted if p in e.paths] or [e.default_path]


def run_gate_set(ctx, spec: GateSpec, phase: str = "gate") -> dict:
    """Run md5 (models x paths), op-oracle (ops) and KL (per path) checks."""

    checks: list[Check] = []
    engine = spec.engine or ctx.profile.gates.engine
    paths = _paths(ctx, spec, engine)
    if not spec.models and not spec.ops and not spec.kl:
        raise UsageError(f"{phase} gates: nothing to check (no models, ops or kl in the profile's gates section or the options)")
    tag = f"{phase}/" if phase else ""
    md5_plan = [(eng, paths if eng == engine else _engine_paths(ctx, eng, spec.paths)) for eng in spec.engines or [engine]]
    total = len(spec.models) * sum(len(p) for _, p in md5_plan) + len(spec.ops) + (len(paths) if spec.kl else 0)
    with ctx.out.progress() as prog:
        task = prog.add_task(f"{phase} gates", total=total, status="")

        def step(label, fn, *args):
            prog.update(task, status=label)
            checks.append(fn(*args))
            prog.advance(task)

        for eng, eng_paths in md5_plan:
            for m in spec.models:
                for p in eng_paths:
                    step(f"md5 {m}/{p} {eng or ''}", md5_gate, ctx, m, p, eng, spec.expect, spec.form, tag)
        for op in spec.ops:
            step(f"op {op}", op_gate, ctx, op, spec.backend, engine, tag)
        if spec.kl:
            for p in paths:
                step(f"kl {p}", lambda p=p: kl_gate(ctx, engine=engine, path=p, tag=tag))
    status = overall(checks)
    for c in checks:
        mark = {"pass": "ok  ", "fail": "FAIL", "error": "ERR ", "flaky": "FLKY", "not-run": "skip"}[c.status]
        ctx.out.info(f"  [{mark}] {phase} {c.check}: expected {c.expected}, got {c.got}" + (f" -- {c.detail}" if c.detail else ""))
    return {"phase": phase, "status": status, "checks": [c.to_dict() for c in checks]}


def write_summary(ctx, sets: dict[str, dict]) -> None:
    """gates.json, gate_summary.tsv (the users' layout) and gate_checks.tsv for every phase run so far."""

    if ctx.run is None:
        return
    status = PASS if sets and all(s["status"] == PASS for s in sets.values()) else FAIL
    summary.write(ctx.run, sets, ctx.profile)
    ctx.run.write_json("gates.json", {**sets, "status": status})


def _sets(ctx) -> dict:
    if ctx.run and (ctx.run.path / "gates.json").exists():
        data = ctx.run.read_json("gates.json")
        return {k: v for k, v in data.items() if k != "status"}
    return {}


def run_phase(ctx, phase: str, spec: GateSpec | None = None) -> dict:
    """One phase of the gate set; the caller holds the GPU lock (parity.session)."""
    spec = spec or GateSpec.from_profile(ctx.profile)
    result = run_gate_set(ctx, spec, phase)
    sets = _sets(ctx)
    sets[phase] = result
    write_summary(ctx, sets)
    if result["status"] != PASS:  # red, or nothing ran at all: neither is green
        if phase == "post" and ctx.run:
            ctx.run.mark_invalid(f"post-gate {result['status']}")
        failed = [f"{c['check']} ({c['status']}: {c['detail'][:80]})" for c in result["checks"] if c["status"] in ("fail", "error")]
        raise GateFailed(f"{phase}-gate {'red' if failed else 'not green (no check ran)'}: {', '.join(failed) or 'every check was not-run'}")
    return result


def spec_from_options(options: dict) -> tuple[str, dict]:
    """(phase, GateSpec overrides) from a gate step's `with:` (checked; lists may be "a,b")."""
    lists, scalars = {"models", "paths", "ops", "engines"}, {"engine", "expect", "form", "backend", "phase"}
    check_step_options("gate", options, lists | scalars | {"kl"})
    for k in lists & set(options):
        v = options[k]
        if isinstance(v, str):
            options[k] = [x.strip() for x in v.split(",") if x.strip()]
        elif not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise ConfigError("campaign", f"with.{k}", "expected a list of names")
    for k in scalars & set(options):
        if not isinstance(options[k], str):
            raise ConfigError("campaign", f"with.{k}", "expected a string")
    if "kl" in options and not isinstance(options["kl"], bool):
        raise ConfigError("campaign", "with.kl", "expected true or false")
    phase = options.pop("phase", "gate")
    return phase, options
