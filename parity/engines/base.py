"""What every engine kind has: the common fields of its profile section, the Launch it
hands the server lifecycle, and the kind's lifecycle with its defaults.

A kind answers for its own knowledge (provisioning, launch, readiness, token counting,
Prometheus families, engine clock, memory, doctor, provenance).  What does not apply to a
kind is said as "not applicable" (NotApplicable, or a row that says so), never faked."""

from __future__ import annotations

import os

import msgspec

from parity.errors import UsageError
from parity.metrics.prometheus import Series


class NotApplicable(UsageError):
    """Something a kind does not have (a binary, a build, a process): one line, exit 2."""


class EngineSection(msgspec.Struct):
    """The keys every engine section has (engines.NAME); a kind adds its own."""

    kind: str = "llama"
    description: str = ""
    env: dict[str, str] = msgspec.field(default_factory=dict)  # always set for this engine (its server, its tools)
    ready_timeout_s: float = 120.0
    ready_probe_timeout_s: float = 5.0
    stop_grace_s: float = 15.0


class Launch(msgspec.Struct):
    argv: list[str]  # empty: the server is not started by parity (an endpoint)
    env: dict[str, str]  # overrides on top of the inherited environment
    unset: list[str]  # inherited names removed from the child's environment
    ready_path: str
    served_name: str
    tokenize: str  # /tokenize wire format for the load generator: "content" or "prompt" (parity.loadgen.client)
    models_path: str | None = None  # GET it once ready: the served name must be listed
    metrics_path: str | None = None  # scraped around each point (Prometheus text)
    engine: str = ""
    kind: str = ""
    notes: list[str] = msgspec.field(default_factory=list)
    count: str = "chunks"  # how its stream says tokens per chunk (parity.loadgen.client.COUNTERS)
    request_extra: dict = msgspec.field(default_factory=dict)  # fields added to every completion request
    props_path: str | None = None  # llama-server /props: the context each slot really has
    probe_extra: dict = msgspec.field(default_factory=dict)  # fields the output-parity probe adds (vLLM: token ids as logprob keys)
    family: Series = msgspec.field(default_factory=Series)  # what its /metrics calls each quantity (reconciliation, engine clock)
    host: str = "127.0.0.1"
    port: int = 0
    start: list[str] = msgspec.field(default_factory=list)  # an endpoint's own start command (run by parity, not the server)
    stop: list[str] = msgspec.field(default_factory=list)  # ... and its stop command
    spawned: bool = True  # parity starts the server itself (the port must be free before, its process is measured)


class DoctorRow(msgspec.Struct):
    status: str  # ok | missing | degraded
    found: str
    consequence: str = ""


class DoctorTool(msgspec.Struct):
    binary: str
    argv: list[str]
    purpose: str


class ContextNeed(msgspec.Struct):
    """The tokens one request may use (prompt + generated) and what sets that limit; None: unknown."""

    tokens: int | None
    what: str


class EngineKind:
    """The lifecycle every kind shares.  Subclasses set `name` and `section` and override
    what they know; the defaults say "not applicable".  A method about one engine takes it
    bound (`eng`: parity.engines.bound.Engine): its section is eng.section, its name eng.name,
    and eng.profile is read only for another section (models, serving, sources)."""

    name = ""
    section: type = EngineSection
    binary_gates = False  # md5 / op-oracle / KL run this engine's own llama.cpp binaries
    model_source: str | None = None  # what it reads of a profile model: "gguf" (models.X.path), "checkpoint" (vllm_path), None (nothing)
    variants = False  # a lever arm or a bisection probe can be built from it (a series, a pin)
    memory_note: str | None = None  # said beside its memory figures
    forks = False  # its server forks worker processes (a profiler must follow them)
    profiled_serving = True  # parity starts its server, so a profiler can wrap it
    family = Series()

    # ---- the profile section ----------------------------------------------------------
    def validate(self, eng, label: str) -> None:
        """Checks of the section that types alone cannot express (ConfigError)."""

    def expand_paths(self, e, expand) -> None:
        """Expand ~ and ${...} in the section's path fields."""

    # ---- preparation, before the GPU lock ------------------------------------------------
    def provision(self, eng, runner, out) -> dict:
        """Build or install what the engine runs (before the lock); a short record of what it did."""
        return self.provenance(eng, runner, out)

    def provenance(self, eng, runner, out) -> dict:
        return {"engine": eng.name, "kind": self.name}

    def provenance_cells(self, row: dict) -> dict | None:
        """The report's provenance cells (source, series, tree, flags, cuda_archs, bin, key) of a
        builds.json row this kind wrote; None: a build row (source, series, tree), read by the report."""
        return None

    def provenance_identity(self, row: dict) -> tuple[str, str] | None:
        """(source kind, identity) of a builds.json row this kind wrote, for the history store;
        None: a build row (its source's pin, package, path or tree)."""
        return None

    def dry_paths(self, eng, runner) -> dict[str, str]:
        """{what: path or placeholder} the real run would use (the dry run's go/no-go)."""
        return {}

    def tool_path(self, eng, tool: str, runner, out, dry: bool = False) -> str:
        raise NotApplicable(f"engine {eng.name} is a {self.name} engine: it has no {tool} (llama.cpp tools need a llama engine)")

    def binary_gates_note(self) -> str | None:
        """None: the binary gates (md5, op-oracle, KL) can run this engine's own binaries; else
        why they do not apply (summary.json's binary_gates, the report's gates section)."""
        return None if self.binary_gates else f"not applicable: parity runs no llama.cpp binary of a {self.name} engine"

    # ---- serving ------------------------------------------------------------------------
    def env(self, eng, path: str | None = None) -> dict[str, str]:
        return dict(eng.section.env)

    def kernel_path(self, log_text: str) -> dict | None:
        """What its server log says about the kernels it runs (vLLM: native FP4 or the Marlin
        fallback); None: its log says nothing parity reads."""
        return None

    def model_file(self, eng, model: str) -> str:
        """What the server is given for the profile model `model` (a file, a directory, a name)."""
        m = eng.profile.models.get(model)
        return os.path.expanduser(m.path if m is not None else model)

    def local_model_file(self, eng, model: str) -> str | None:
        """The model file the engine reads, when it is one on this machine and there already."""
        return None

    def launch(self, eng, model_file: str, port: int, shape, path: str | None = None, dry: bool = False, model: str | None = None, out=None) -> Launch:
        """How its server is started (argv, env) or reached, and how the load generator speaks to
        it.  No default: every kind says it (NotImplementedError here)."""
        raise NotImplementedError

    def context_need(self, eng, shape, model_file: str | None = None) -> ContextNeed:
        return ContextNeed(None, f"engine {eng.name} does not say")

    def queue_limit(self, e, shape) -> int | None:
        """Requests the server runs at once before it queues (None: no fixed slots)."""
        return None

    def load_caveats(self, eng, shape) -> list[str]:
        """What about this engine's serving setup (eng: the bound engine) can move its latency with the
        load's history or end it (plan notes)."""
        return []

    def on_gpu(self, e) -> bool:
        return False

    def doctor(self, eng, runner) -> list:
        """What `parity doctor` says of this engine: DoctorRow (a finding) or DoctorTool (a binary
        whose --version the doctor runs); [] says nothing."""
        return []


def engine_env(eng, path: str | None) -> dict[str, str]:
    """engine.env + engine.paths[path] (the default path when None), for kinds with paths."""
    e = eng.section
    paths = getattr(e, "paths", {}) or {}
    path = path or getattr(e, "default_path", None)
    env = dict(e.env)
    if path is not None:
        if paths and path not in paths:
            raise UsageError(f"engine {eng.name} has no path {path!r} (paths: {', '.join(paths)})")
        env.update(paths.get(path, {}))
    return env


def served_name(profile, model: str | None = None, default: str = "") -> str:
    model = model or profile.serving.model
    m = profile.models.get(model)
    return (m.served_name if m and m.served_name else model) or default
