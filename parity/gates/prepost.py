"""Gate sets and the pre/post wrapper every benchmark runs inside.

A gate set is every kind of parity.gates.kinds.GATES that runs in one, in registry order,
each expanded into its checks (GateSpec: the gate engine and each kind's options).
parity.session.gated runs the gate set before (a red pre-gate stops the
benchmark), runs the body, runs it again after, and writes gates.json,
gate_summary.tsv in the users' layout (phase check status actual expected
details, parity.gates.summary) and gate_checks.tsv (parity's: phase check
expected got status).  A red post-gate marks the run invalid: its numbers do
not count.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from parity.artifacts import RunDir
from parity.context import Run
from parity.errors import ConfigError, GateFailed, UsageError
from parity.gates import summary
from parity.gates.base import BOOL, LIST, STR, GateInputs, binary_engine, gate_set_engine
from parity.gates.checks import FAIL, PASS, Check, overall
from parity.gates.kinds import gate_set
from parity.options import check_step_options


@dataclass
class GateSpec:
    """What a gate set runs: the gate engine and each kind's options (GateKind.options)."""

    models: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)
    kl: bool = False
    kl_sweep: list = field(default_factory=list)  # the KL drift sweep's contexts (ints; "256" from a campaign step)
    engine: str | None = None
    expect: str | None = None
    form: str | None = None
    backend: str | None = None
    engines: list[str] = field(default_factory=list)  # md5 on several builds (default: [engine])

    @classmethod
    def from_profile(cls, profile, **over) -> "GateSpec":
        return cls.from_gates(profile.gates, **over)

    @classmethod
    def from_gates(cls, g, **over) -> "GateSpec":
        """The profile's gate set (g: its gates section), with `over` where not None."""
        spec = cls(engine=g.engine, **{k: v for kind in gate_set() for k, v in kind.defaults(g).items()})
        for k, v in over.items():
            if v is not None:
                setattr(spec, k, v)
        return spec


def gate_engines(inputs: GateInputs, spec: GateSpec | None = None) -> list[str]:
    """The engines whose binaries this gate set runs, once each, as each kind says (md5: the gated
    builds and the reference build; op-oracle, KL: the gate engine).  Build them before the GPU lock."""
    spec = spec or GateSpec.from_gates(inputs.gates)
    check_plan(inputs.gates, spec)
    engine = binary_engine(inputs, spec)
    names = [n for n in dict.fromkeys(n for k in gate_set() for n in k.engines(inputs.gates, spec, engine)) if n]
    for n in names:
        if n in inputs.engines and (note := inputs.engines[n].kind.binary_gates_note()):
            raise UsageError(f"gates on engine {n}: the gates run an engine's own binaries, {note}")
    return names


def check_plan(gates, spec: GateSpec) -> None:
    """What every kind can check before any build, run dir or lock (e.g. the KL text is long enough
    for its chunks at every context; gates: the profile's gates section): UsageError, one line."""
    for k in gate_set():
        k.check_plan(gates, spec)


def binary_gates(inputs: GateInputs, engines, spec: GateSpec | None) -> dict[str, dict]:
    """Per engine of a measurement, whether the binary gates (md5, op-oracle, KL) ran on its own
    binaries: {"status": gated | not run | not applicable, "why"} (not applicable: as its kind says)."""
    out = {}
    for e in engines:
        note = inputs.engine(e).kind.binary_gates_note()
        if note:
            out[e] = {"status": "not applicable", "why": note}
            continue
        if spec is None:
            out[e] = {"status": "not run", "why": "ungated run (--no-gates)"}
            continue
        engine = binary_engine(inputs, spec)
        ran = [words for k in gate_set() for words in k.ran_on(inputs.gates, spec, engine, e)]
        covered = gate_engines(inputs, spec)
        out[e] = {"status": "gated", "why": "pre and post: " + "; ".join(ran)} if ran else {"status": "not run", "why": f"the gate set runs on {', '.join(covered) or 'no engine'} (gates.engine, gates.reference_engine)"}
    return out


def gate_models(gates, spec: GateSpec) -> list[str]:
    """The model files this gate set reads (md5 models, the KL models; gates: the profile's gates
    section): prepared before the lock."""
    return [m for m in dict.fromkeys(m for k in gate_set() for m in k.models(gates, spec)) if m]


def wanted_kinds(spec: GateSpec, phase: str = "gate") -> list:
    """The kinds this gate set runs, in registry order; none is a one-line UsageError."""
    kinds = [k for k in gate_set() if k.wanted(spec)]
    if not kinds:
        asks = [k.switch for k in gate_set() if k.switch]
        raise UsageError(f"{phase} gates: nothing to check (no {', '.join(asks[:-1])} or {asks[-1]} in the profile's gates section or the options)")
    return kinds


def run_gate_set(inputs: GateInputs, run: Run, spec: GateSpec, phase: str = "gate") -> dict:
    """Every kind's checks in registry order (md5 models x paths, op-oracle ops, KL per path)."""

    engine = gate_set_engine(inputs.gates, spec)
    if engine:
        inputs.engine(engine)
    kinds = wanted_kinds(spec, phase)
    tag = f"{phase}/" if phase else ""
    plan = [(k, t) for k in kinds for t in k.expand(inputs, spec, engine)]
    checks: list[Check] = []
    with run.out.progress() as prog:
        task = prog.add_task(f"{phase} gates", total=len(plan), status="")
        for k, t in plan:
            prog.update(task, status=k.label(t))
            checks.append(k.run(inputs, run, spec, t, tag))
            prog.advance(task)
    status = overall(checks)
    for c in checks:
        mark = {"pass": "ok  ", "fail": "FAIL", "error": "ERR ", "flaky": "FLKY", "not-run": "skip"}[c.status]
        run.out.info(f"  [{mark}] {phase} {c.check}: expected {c.expected}, got {c.got}" + (f" -- {c.detail}" if c.detail else ""))
    return {"phase": phase, "status": status, "checks": [c.to_dict() for c in checks]}


def write_summary(inputs: GateInputs, rd: RunDir | None, sets: dict[str, dict]) -> None:
    """gates.json, gate_summary.tsv (the users' layout) and gate_checks.tsv for every phase run so far
    (rd None: no run directory, nothing written)."""

    if rd is None:
        return
    status = PASS if sets and all(s["status"] == PASS for s in sets.values()) else FAIL
    summary.write(rd, sets, inputs.gates.engine, inputs.default_paths)
    rd.write_json("gates.json", {**sets, "status": status})


def _sets(rd: RunDir | None) -> dict:
    if rd is not None and (rd.path / "gates.json").exists():
        data = rd.read_json("gates.json")
        return {k: v for k, v in data.items() if k != "status"}
    return {}


def run_phase(inputs: GateInputs, run: Run, phase: str, spec: GateSpec | None = None) -> dict:
    """One phase of the gate set; the caller holds the GPU lock (parity.session)."""
    spec = spec or GateSpec.from_gates(inputs.gates)
    result = run_gate_set(inputs, run, spec, phase)
    sets = _sets(run.dir)
    sets[phase] = result
    write_summary(inputs, run.dir, sets)
    if result["status"] != PASS:  # red, or nothing ran at all: neither is green
        if phase == "post" and run.dir is not None:
            run.dir.mark_invalid(f"post-gate {result['status']}")
        failed = [f"{c['check']} ({c['status']}: {c['detail'][:80]})" for c in result["checks"] if c["status"] in ("fail", "error")]
        raise GateFailed(f"{phase}-gate {'red' if failed else 'not green (no check ran)'}: {', '.join(failed) or 'every check was not-run'}")
    return result


def spec_from_options(options: dict) -> tuple[str, dict]:
    """(phase, GateSpec overrides) from a gate step's `with:` (checked against every kind's options;
    lists may be "a,b")."""
    types = {"engine": STR, "phase": STR, **{k: t for kind in gate_set() for k, t in kind.options.items()}}
    check_step_options("gate", options, set(types))
    for k in [k for k in options if types[k] == LIST]:
        v = options[k]
        if isinstance(v, str):
            options[k] = [x.strip() for x in v.split(",") if x.strip()]
        elif not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise ConfigError("campaign", f"with.{k}", "expected a list of names")
    for k in [k for k in options if types[k] == STR]:
        if not isinstance(options[k], str):
            raise ConfigError("campaign", f"with.{k}", "expected a string")
    for k in [k for k in options if types[k] == BOOL]:
        if not isinstance(options[k], bool):
            raise ConfigError("campaign", f"with.{k}", "expected true or false")
    phase = options.pop("phase", "gate")
    return phase, options
