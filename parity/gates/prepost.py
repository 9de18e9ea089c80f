"""Gate sets and the pre/post wrapper every benchmark runs inside.

`with gated(ctx): ...` runs the gate set before (a red pre-gate stops the
benchmark), runs the body, runs it again after, and writes gate_summary.tsv
(phase, check, expected, got, status) and gates.json.  A red post-gate marks
the run invalid: its numbers do not count.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

from parity.errors import ConfigError, GateFailed
from parity.gates.checks import FAIL, PASS, Check, overall
from parity.gates.run import kl_gate, md5_gate, op_gate


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

    @classmethod
    def from_profile(cls, profile, **over) -> "GateSpec":
        g = profile.gates
        spec = cls(list(g.models), list(g.paths), list(g.ops), g.kl_in_prepost, g.engine)
        for k, v in over.items():
            if v is not None:
                setattr(spec, k, v)
        return spec


def run_gate_set(ctx, spec: GateSpec, phase: str = "gate") -> dict:
    checks: list[Check] = []
    engine = spec.engine or ctx.profile.gates.engine
    e = ctx.profile.engine(engine) if engine else None
    paths = spec.paths or ([e.default_path] if e and e.default_path else [None])
    if "all" in paths and e:
        paths = list(e.paths) or [None]
    tag = f"{phase}/" if phase else ""
    total = len(spec.models) * len(paths) + len(spec.ops) + (1 if spec.kl else 0)
    done = 0
    with ctx.out.progress() as prog:
        task = prog.add_task(f"{phase} gates", total=total, status="")
        for m in spec.models:
            for p in paths:
                prog.update(task, status=f"md5 {m}/{p}")
                checks.append(md5_gate(ctx, m, p, engine, spec.expect, spec.form, tag))
                done += 1
                prog.update(task, completed=done)
        for op in spec.ops:
            prog.update(task, status=f"op {op}")
            checks.append(op_gate(ctx, op, spec.backend, engine, tag))
            done += 1
            prog.update(task, completed=done)
        if spec.kl:
            prog.update(task, status="kl")
            checks.append(kl_gate(ctx, engine=engine, tag=tag))
            prog.update(task, completed=done + 1)
    status = overall(checks)
    for c in checks:
        mark = {"pass": "ok  ", "fail": "FAIL", "error": "ERR ", "not-run": "skip"}[c.status]
        ctx.out.info(f"  [{mark}] {phase} {c.check}: expected {c.expected}, got {c.got}{' - ' + c.detail if c.detail and c.status != PASS else ''}")
    return {"phase": phase, "status": status, "checks": [c.to_dict() for c in checks]}


def write_summary(ctx, sets: dict[str, dict]) -> None:
    """gate_summary.tsv + gates.json for every phase run so far."""
    if ctx.run is None:
        return
    rows = ["phase\tcheck\texpected\tgot\tstatus"]
    for phase, s in sets.items():
        for c in s["checks"]:
            rows.append("\t".join(str(x).replace("\t", " ") for x in (phase, c["check"], c["expected"], c["got"], c["status"])))
    status = PASS if sets and all(s["status"] in (PASS, "not-run") for s in sets.values()) else FAIL
    ctx.run.write_text("gate_summary.tsv", "\n".join(rows) + "\n")
    ctx.run.write_json("gates.json", {**sets, "status": status})


def _sets(ctx) -> dict:
    if ctx.run and (ctx.run.path / "gates.json").exists():
        data = ctx.run.read_json("gates.json")
        return {k: v for k, v in data.items() if k != "status"}
    return {}


def run_phase(ctx, phase: str, spec: GateSpec | None = None) -> dict:
    spec = spec or GateSpec.from_profile(ctx.profile)
    result = run_gate_set(ctx, spec, phase)
    sets = _sets(ctx)
    sets[phase] = result
    write_summary(ctx, sets)
    if result["status"] == FAIL:
        if phase == "post" and ctx.run:
            ctx.run.mark_invalid("post-gate failed")
        failed = [c["check"] for c in result["checks"] if c["status"] in ("fail", "error")]
        raise GateFailed(f"{phase}-gate red: {', '.join(failed)}")
    return result


@contextmanager
def gated(ctx, spec: GateSpec | None = None, enabled: bool = True):
    """Pre-gates, the body, post-gates (also after a failing body, not after an interrupt)."""
    if not enabled:
        yield
        return
    run_phase(ctx, "pre", spec)
    try:
        yield
    except KeyboardInterrupt:
        raise
    except BaseException:
        try:
            run_phase(ctx, "post", spec)
        except GateFailed:
            pass
        raise
    run_phase(ctx, "post", spec)


def campaign_step(ctx, options: dict) -> dict:
    """kind: gate -- options {phase: pre|post|<name>, models, paths, ops, kl, engine}."""
    allowed = {"phase", "models", "paths", "ops", "kl", "engine", "expect", "form", "backend"}
    bad = set(options) - allowed
    if bad:
        raise ConfigError("campaign", f"with.{sorted(bad)[0]}", f"unknown gate option (known: {', '.join(sorted(allowed))})")
    phase = str(options.pop("phase", "gate"))
    spec = GateSpec.from_profile(ctx.profile, **options)
    result = run_phase(ctx, phase, spec)
    return {"phase": phase, "status": result["status"], "checks": [{k: c[k] for k in ("check", "expected", "got", "status")} for c in result["checks"]]}
