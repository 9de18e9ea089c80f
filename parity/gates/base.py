"""What every gate kind has: what it reads, how it expands into checks, how it runs one, how it
compares two arms (the lever A/B) where that applies, and how its rows read in the users' layout.

A kind answers for its own knowledge; the pre/post gate set (prepost.py), `parity gate`, the
lever A/B (parity.levers.gates) and the bisection probes (parity.bisect.probe) iterate GATES
(kinds.py) and never name a kind's options or checks themselves."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from parity.context import Run
from parity.engines.bound import Engine, bind_all
from parity.errors import ConfigError
from parity.gates.checks import PASS, Check
from parity.models.synth import ensure_model

READS = ("models", "paths", "ops", "engines")  # what a gate set gives its kinds to read
LIST, STR, BOOL = "list", "str", "bool"  # the type of a gate option (a GateSpec field, a gate step's `with:` key)


@dataclass(frozen=True)
class Target:
    """One check a kind expands into: the engine, model, path or op it runs on (None: not read)."""

    engine: str | None = None
    model: str | None = None
    path: str | None = None
    op: str | None = None
    n_ctx: int | None = None  # the KL drift sweep: the context of this row (None: gates.kl.ctx)


@dataclass(frozen=True)
class GateInputs:
    """What the gate kinds read, resolved once where the gate plan is built (gate_inputs): the gates
    section, every engine bound, the models, and what a session shares between its checks."""

    gates: Any  # the profile's gates section
    engines: dict[str, Engine]
    models: dict  # the profile's models section
    model_file: Callable[[str], str]  # a profile model's file (made when missing: prepared before the lock)
    profile: str  # the profile's name (in the messages)
    source: str  # the profile's file (an unknown engine's error names it)
    serving_model: str | None = None  # the lossy lever's KL candidate when gates.kl.candidate is unset
    registry: str | None = None  # the user registry of canonical md5s (--registry)
    references: dict = field(default_factory=dict)  # the md5 reference builds' runs, once per phase and model

    def engine(self, name: str) -> Engine:
        """The bound engine `name` (a one-line ConfigError for an unknown one, as the profile gives it)."""
        if name not in self.engines:
            known = ", ".join(self.engines) or "none"
            raise ConfigError(self.source, f"engines.{name}", f"no such engine (known: {known})")
        return self.engines[name]

    @property
    def default_paths(self) -> dict[str, str | None]:
        return {n: getattr(e.section, "default_path", None) for n, e in self.engines.items()}


def gate_inputs(profile, registry: str | None = None, references: dict | None = None) -> GateInputs:
    """The profile's gate inputs: its engines bound once (references: a session's reference runs)."""
    return GateInputs(profile.gates, bind_all(profile, profile.engines), profile.models,
                      lambda model: ensure_model(profile, model), profile.name, profile.source_file,
                      profile.serving.model, registry, {} if references is None else references)  # fmt: skip


class GateKind:
    """The defaults every gate kind shares.  Subclasses set `name`, `reads`, `options` and say
    what they know; a kind measured elsewhere (in_gate_set False) expands into no check."""

    name = ""  # its key in GATES and its Check.kind
    what = ""  # one line: what it checks
    reads: tuple[str, ...] = ()  # of READS: what of a gate set it reads
    switch: str | None = None  # the GateSpec field that asks for it (a non-empty list, true)
    options: dict[str, str] = {}  # its GateSpec fields -> LIST | STR | BOOL (a gate step's `with:` keys)
    in_gate_set = True  # False: measured elsewhere (output parity: inside the serving snapshot), read from its summary
    arms: dict[str, str] = {}  # the lever A/B: a lever's gate kind (BE | KL) -> "gate" | "evidence"

    # ---- a gate set ------------------------------------------------------------------------
    def defaults(self, g) -> dict:
        """Its GateSpec fields from the profile's gates section."""
        return {}

    def wanted(self, spec) -> bool:
        return bool(self.in_gate_set and self.switch and getattr(spec, self.switch))

    def engines(self, gates, spec, engine: str | None) -> list[str]:
        """The engines whose binaries it runs (built before the lock); engine: the gate engine."""
        return [engine] if self.wanted(spec) else []

    def models(self, gates, spec) -> list[str]:
        """The model files it reads (made before the lock)."""
        return []

    def check_plan(self, gates, spec) -> None:
        """What its checks need that can be known before any build or lock (UsageError, one line)."""

    def expand(self, inputs: GateInputs, spec, engine: str | None) -> list[Target]:
        """Its checks, in order; engine: spec.engine or gates.engine (None: each check's default)."""
        return []

    def label(self, t: Target) -> str:
        """The progress line while t runs."""
        return self.name

    def run(self, inputs: GateInputs, run: Run, spec, t: Target, tag: str) -> Check:
        raise NotImplementedError

    def dry(self, inputs: GateInputs, runner, out, spec, t: Target) -> dict:
        """t as `parity gate --dry-run` shows it, running and making nothing: {"commands": [{"argv",
        "env"}], "expected": what it is held to, "files": {what: path or "<placeholder>"} for the
        go / no-go}.  A model made on the first real run (synth, hf) is not a file to check."""
        return {"commands": [], "expected": "-", "files": {}}

    def observe(self, inputs: GateInputs, run: Run, spec, t: Target, tag: str) -> Check:
        """One check on its own terms, with no expectation given (what a reference records)."""
        return self.run(inputs, run, spec, t, tag)

    def ran_on(self, gates, spec, engine: str | None, e: str) -> list[str]:
        """What it ran on engine e's own binaries, in words (summary.json's binary_gates)."""
        return [self.what] if self.wanted(spec) and e == engine else []

    # ---- two arms (the lever A/B) ------------------------------------------------------------
    def check_arms(self, profile) -> None:
        """What comparing two arms needs of the profile (UsageError before anything is built)."""

    def arm_models(self, profile, models: list[str]) -> list[str]:
        """The model files comparing two arms reads."""
        return list(models)

    def compare_arms(self, inputs: GateInputs, run: Run, a: Engine, b: Engine, models: list[str],
                     paths: list[str | None], tag: str):  # fmt: skip
        """Both arms' results and whether they agree: a row or a list of rows, each with phase and
        status (error: a run failed); the kind's arm_ok says which status agrees."""
        raise NotImplementedError

    def arm_rows(self, result) -> list[dict]:
        return result if isinstance(result, list) else [result] if result else []

    def arm_ok(self, row: dict) -> bool:
        return row["status"] == "pass"

    def arms_summary(self, rows: list[dict]) -> str:
        return f"{self.name} {sum(map(self.arm_ok, rows))}/{len(rows)} pass"

    def arm_problem(self, row: dict, role: str) -> str:
        return f"{self.name} {row['phase']} {row['status']}: {row['detail']}"

    # ---- measured elsewhere, read from the run's summary -------------------------------------
    def from_summary(self, doc: dict) -> Check | None:
        """Its verdict in a run's summary (None: not measured there)."""
        return None

    # ---- the users' layout (gate_summary.tsv: phase check status actual expected details) ------
    def users_name(self, c: dict, gate_engine: str | None, default_paths: dict[str, str | None]) -> str:
        return f"{c['kind']}_{c.get('model') or 'model'}_{c.get('path')}"

    def users_status(self, c: dict) -> str:
        if c["status"] == PASS:
            return "ok"
        return "missing" if (c.get("got") or "-") == "-" else "fail"

    def users_expected(self, c: dict) -> str:
        return "" if (c.get("expected") or "-") == "-" else c["expected"]

    def users_output(self, c: dict) -> str | None:
        """The run-dir file that holds its output (None: the detail says it)."""
        return (c.get("data") or {}).get("output")


def gate_set_engine(gates, spec) -> str | None:
    """The engine the gate set's checks run on: --engine, else gates.engine (None: each check's
    default, the profile's first engine)."""
    return spec.engine or gates.engine


def binary_engine(inputs: GateInputs, spec) -> str | None:
    """The gate engine with the profile's first engine as the last default (the engine built)."""
    return gate_set_engine(inputs.gates, spec) or next(iter(inputs.engines), None)


def set_paths(inputs: GateInputs, spec, engine: str | None) -> list[str | None]:
    """The gate set's paths on the gate engine: the requested ones, else its default; all: every path."""
    e = inputs.engine(engine).section if engine else None
    paths = spec.paths or ([e.default_path] if e and e.default_path else [None])
    if "all" in paths:
        paths = list(e.paths) if e and e.paths else [None]
    return paths


def engine_paths(eng: Engine, wanted: list[str]) -> list[str | None]:
    """The requested paths this engine has; else its default path (stock has no paged path)."""
    e = eng.section
    if "all" in wanted:
        return list(e.paths) or [e.default_path]
    return [p for p in wanted if p in e.paths] or [e.default_path]
