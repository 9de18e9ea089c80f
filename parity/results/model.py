"""The result model: the rows and documents parity writes into a run directory, as msgspec Structs
(declared as dataclasses would be: creating a Struct class costs about a fiftieth of a dataclass's,
and most parity starts import this module).

Each declares the fields parity reads (their types are checked when a file is read, and its
JSON Schema under docs/schemas/ is generated from them); a file may hold more keys (a row's
metrics, provenance), kept as they are.  FINITE names the parts in which every number must be
finite.  SCHEMA_VERSION counts changes of this model; a file written before it was versioned
reads as version 0."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Optional, Union

import msgspec
from msgspec import field

SCHEMA_VERSION = 1
Number = Optional[float]  # a value that could not be computed is null, never NaN
Point = Union[int, float]  # a sweep's N, or a workload's point key (an open-loop rate is a float)
Value = Optional[Union[int, float]]  # a row's number: a metric, a count


class Reconciliation(msgspec.Struct):
    """A point's server-side count against the client's (parity.serving.server_metrics)."""

    quantity: str
    client: Any
    server: Any
    rule: str
    status: str


class Flat(msgspec.Struct):
    """A record a file holds flat: its declared fields beside its numbers (metrics: a metric, a count; null
    with a reason beside it) and its other keys (info), in the file's key order (layout): read with
    of(), written with flat(), the same bytes.  Subclasses declare metrics, info and layout last."""

    CARRIED: ClassVar[tuple[str, ...]] = ("metrics", "info", "layout")  # in memory only: flat() spreads them
    TYPED: ClassVar[dict[str, Any]] = {}  # declared fields held as Structs: their type (a flat file holds plain values)

    @classmethod
    def fields(cls) -> tuple[str, ...]:
        """The declared fields (not the carried ones), in declaration order."""
        return _shape(cls)[0]

    @classmethod
    def of(cls, flat: dict[str, Any]):
        """A flat record (a file's, or one parity assembled) typed."""
        fields = cls.fields()
        rec = cls(**{k: flat[k] for k in fields if k in flat}, layout=list(flat))
        for k, t in cls.TYPED.items():
            setattr(rec, k, msgspec.convert(getattr(rec, k), t))
        for k, v in flat.items():
            if k not in fields:
                (rec.metrics if _is_value(v) else rec.info)[k] = v
        return rec

    def flat(self) -> dict[str, Any]:
        """The record as the file holds it: its keys in layout order, then any added since."""
        declared = (k for k in self.fields() if k not in self.layout and self._set(k))
        return {k: self[k] for k in dict.fromkeys([*self.layout, *declared, *self.metrics, *self.info]) if k in self}

    def metric(self, name: str) -> Value:
        """The record's number under name (None: absent or null)."""
        return self.metrics.get(name)

    def put(self, key: str, value: Any) -> None:
        """Set one flat key: a declared field, else a number (metrics) or another value (info)."""
        if key in self.fields():
            setattr(self, key, msgspec.convert(value, self.TYPED[key]) if key in self.TYPED else value)
        else:
            self.metrics.pop(key, None)
            self.info.pop(key, None)
            (self.metrics if _is_value(value) else self.info)[key] = value
        if not self.layout:  # a record built field by field: its declared keys first, as of() would read them
            self.layout = [k for k in self.fields() if self._set(k)]
        if key not in self.layout:
            self.layout.append(key)

    def _set(self, key: str) -> bool:
        """A declared field that is required or holds other than its default (a record built without a layout)."""
        defaults = _shape(type(self))[1]
        return key not in defaults or getattr(self, key) != defaults[key]

    # a flat view (rec["key"], rec.get, `in`, rec[key] = v) for the code not yet moved to the attributes (issue 55)
    def __getitem__(self, key: str) -> Any:
        if self._holds(key):
            value = getattr(self, key)
            return msgspec.to_builtins(value) if key in self.TYPED else value
        if key in self.metrics:
            return self.metrics[key]
        if key in self.info:
            return self.info[key]
        raise KeyError(key)

    def _holds(self, key: str) -> bool:
        """A declared field the flat record has (read from the file, or set)."""
        return key in self.fields() and (key in self.layout or self._set(key))

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and (key in self.metrics or key in self.info or self._holds(key))

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default

    def keys(self) -> list[str]:
        return list(self.flat())

    def items(self) -> list[tuple[str, Any]]:
        return list(self.flat().items())

    def __iter__(self):
        return iter(self.keys())

    def __setitem__(self, key: str, value: Any) -> None:
        self.put(key, value)


_SHAPES: dict[type, tuple[tuple[str, ...], dict[str, Any]]] = {}


def _shape(cls: type) -> tuple[tuple[str, ...], dict[str, Any]]:
    """(declared fields, {optional field: its default}) of a Flat class, computed once."""
    if cls not in _SHAPES:
        fields = tuple(f for f in cls.__struct_fields__ if f not in Flat.CARRIED)
        defaults = {f.name: f.default_factory() if f.default is msgspec.NODEFAULT else f.default
                    for f in msgspec.structs.fields(cls) if f.name in fields and not f.required}
        _SHAPES[cls] = (fields, defaults)
    return _SHAPES[cls]


class PointRow(Flat):
    """One engine x point x repeat of a serving sweep (summary.json rows[]).  In the file a row is
    flat: these fields beside its numbers (a metric, a count; null with invalid_reasons or a reason
    beside it) and its other keys (why, warmups, flags, anatomy)."""

    TYPED: ClassVar[dict[str, Any]] = {"reconciliation": list[Reconciliation]}
    engine: str
    n: Point
    repeat: Optional[int] = None
    valid: bool = True
    point: Optional[str] = None
    invalid_reasons: list[str] = field(default_factory=list)
    reconciliation: list[Reconciliation] = field(default_factory=list)
    telemetry: Optional[dict[str, Any]] = None
    server: Optional[dict[str, Any]] = None
    metrics: dict[str, Value] = field(default_factory=dict)  # the row's numbers by name
    info: dict[str, Any] = field(default_factory=dict)  # its other keys
    layout: list[str] = field(default_factory=list)  # the flat row's keys in order: read and written, the same bytes

    @property
    def discarded(self) -> Optional[str]:
        """Why the drift canary took this row's block out of the paired statistics (parity.stats.canary.discard)."""
        return self.info.get("discarded")

    @property
    def label(self) -> str:
        """A workload's point label, else the sweep's N=n."""
        return self.point or f"N={self.n}"


ROW_FIELDS = PointRow.fields()


def _is_value(v: Any) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def point_rows(rows: list[Any]) -> list[PointRow]:
    """rows typed: a flat dict (a test's, a users' artifact's) becomes a PointRow, a PointRow stays."""
    return [r if isinstance(r, PointRow) else PointRow.of(r) for r in rows]


class Median(Flat):
    """Per engine x point: each metric's median over the valid repeats (summary.json medians[]; flat
    in the file, as a row is)."""

    engine: str
    n: Point
    repeats: int = 0
    invalid_repeats: int = 0
    point: Optional[str] = None
    spread: dict[str, list[float]] = field(default_factory=dict)
    metrics: dict[str, Value] = field(default_factory=dict)  # each metric's median by name
    info: dict[str, Any] = field(default_factory=dict)  # its other keys (held, held_repeats)
    layout: list[str] = field(default_factory=list)  # the flat median's keys in order


class Verdict(msgspec.Struct):
    """The users' rule on one metric of a ratio row."""

    verdict: str
    reason: str = ""
    threshold_pct: Number = None
    delta_pct: Number = None


class Ratio(Flat):
    """engine / reference per point from medians, with the users' rule (summary.json ratios[]; flat
    in the file: each metric's ratio beside these fields)."""

    TYPED: ClassVar[dict[str, Any]] = {"verdicts": dict[str, Verdict]}
    engine: str
    n: Point
    reference: Optional[str] = None
    repeats: int = 0
    noise: Optional[str] = None
    point: Optional[str] = None
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    paired: dict[str, dict[str, Any]] = field(default_factory=dict)
    metrics: dict[str, Value] = field(default_factory=dict)  # each metric's ratio by name
    info: dict[str, Any] = field(default_factory=dict)  # its other keys
    layout: list[str] = field(default_factory=list)  # the flat ratio's keys in order


class PairedRow(msgspec.Struct):
    """The paired block statistics of one engine/reference x point x metric (summary.json
    paired[], paired.tsv): geometric mean of the per-block ratios and its interval."""

    engine: str
    reference: str
    metric: str
    n: Point
    n_blocks: int = 0
    ratio: Number = None
    low: Number = None
    high: Number = None
    half_width_pct: Number = None
    outcome: Optional[str] = None
    blocks_needed: Optional[int] = None
    ratios: list[float] = field(default_factory=list)
    reason: str = ""
    point: Optional[str] = None


class Summary(msgspec.Struct):
    """summary.json of a serving snapshot or workload run."""

    FINITE: ClassVar[tuple[str, ...]] = ("rows", "medians", "ratios", "paired")
    kind: Literal["snapshot"] = "snapshot"
    schema_version: int = 0
    model: Optional[str] = None
    engines: list[str] = field(default_factory=list)
    reference_engine: Optional[str] = None
    rows: list[PointRow] = field(default_factory=list)
    medians: list[Median] = field(default_factory=list)
    ratios: list[Ratio] = field(default_factory=list)
    paired: list[PairedRow] = field(default_factory=list)
    shape: dict[str, Any] = field(default_factory=dict)
    headline: Optional[str] = None
    valid: bool = True
    invalid_points: list[str] = field(default_factory=list)
    calibration: Optional[dict[str, Any]] = None
    workload: Optional[dict[str, Any]] = None
    shown: list[str] = field(default_factory=list)


class LeverCell(msgspec.Struct):
    """The headline's B/A at one point of a lever A/B."""

    point: Optional[str] = None
    ratio: Number = None
    low: Number = None
    high: Number = None
    outcome: Optional[str] = None
    n_blocks: Optional[int] = None


class LeverMeasurement(msgspec.Struct):
    kind: str = ""
    metric: str = ""
    points: list[LeverCell] = field(default_factory=list)
    invalid_points: list[str] = field(default_factory=list)


class LeverSummary(msgspec.Struct):
    """summary.json of `parity ab` (verdict null while it measures)."""

    FINITE: ClassVar[tuple[str, ...]] = ("key", "measurement")
    kind: Literal["lever-ab"]
    lever: str
    schema_version: int = 0
    verdict: Optional[str] = None
    why: Optional[str] = None
    arms: dict[str, str] = field(default_factory=dict)
    key: Optional[LeverCell] = None
    measurement: Optional[LeverMeasurement] = None
    gates: Optional[dict[str, Any]] = None


class BenchRow(msgspec.Struct):
    """One llama-batched-bench table row (bench.json rows[]); an A/B's rows carry their arm and block."""

    pp: int
    tg: int
    b: int
    s_tg: Number = None
    s_pp: Number = None
    s: Number = None
    n_kv: Optional[int] = None
    t: Number = None
    t_pp: Number = None
    t_tg: Number = None
    engine: Optional[str] = None
    build: Optional[str] = None
    repeat: Optional[int] = None
    slot: Optional[int] = None


class BenchPaired(msgspec.Struct):
    """B/A of one arm x point x metric over the blocks (bench.json paired[])."""

    engine: str
    reference: str
    metric: str
    pp: int
    tg: int
    b: int
    n_blocks: int = 0
    ratio: Number = None
    low: Number = None
    high: Number = None
    outcome: Optional[str] = None
    blocks_needed: Optional[int] = None
    users_rule: Optional[dict[str, Any]] = None


class Bench(msgspec.Struct):
    """bench.json: one llama-batched-bench run, or the blocks of an A/B (parity bench --engines)."""

    FINITE: ClassVar[tuple[str, ...]] = ("rows", "paired", "per_engine")
    kind: Literal["bench"] = "bench"
    schema_version: int = 0
    engine: Optional[str] = None
    model: Optional[str] = None
    rows: list[BenchRow] = field(default_factory=list)
    engines: list[str] = field(default_factory=list)
    reference: Optional[str] = None
    paired: list[BenchPaired] = field(default_factory=list)
    per_engine: list[dict[str, Any]] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    npp: list[int] = field(default_factory=list)
    ntg: list[int] = field(default_factory=list)
    npl: list[int] = field(default_factory=list)


class Manifest(msgspec.Struct):
    """manifest.json: a run's provenance and status (parity.artifacts.RunDir)."""

    FINITE: ClassVar[tuple[str, ...]] = ()
    run_id: Optional[str] = None
    kind: Optional[str] = None
    status: Optional[str] = None
    valid: bool = True
    invalid_reasons: list[str] = field(default_factory=list)
    argv: list[str] = field(default_factory=list)
    hostname: Optional[str] = None
    pid: Optional[int] = None
    started: Optional[str] = None
    ended: Optional[str] = None
    error: Optional[str] = None
    config: Optional[dict[str, Any]] = None
    env: dict[str, Any] = field(default_factory=dict)
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)
    campaign: Optional[dict[str, Any]] = None
    slurm: Optional[dict[str, Any]] = None


class LeverRow(msgspec.Struct):
    """One row of the lever map (lever_map.yaml levers[]): the users edit verdicts and add keys."""

    lever: Union[Annotated[str, msgspec.Meta(min_length=1)], int]
    verdict: Any = None
    ratio: Number = None
    low: Number = None
    high: Number = None


class LeverMap(msgspec.Struct):
    """lever_map.yaml: the users' file; a NaN a hand edit left is listed as null with the row's
    problem named (parity.levers.map.plain_rows), not refused."""

    levers: Optional[list[LeverRow]] = None


class Probe(msgspec.Struct):
    """One probe of a bisection (bisect.json probes[])."""

    n: int
    role: str
    state: int
    label: str
    verdict: str
    result: str = ""


class Bisection(msgspec.Struct):
    """bisect.json."""

    FINITE: ClassVar[tuple[str, ...]] = ()
    kind: Literal["bisect"]
    over: str
    criterion: str
    labels: list[str]
    probes: list[Probe] = field(default_factory=list)
    culprit: Optional[str] = None
    reason: Optional[str] = None


class MatrixTarget(msgspec.Struct):
    """One target of a matrix run (matrix.json is a list of these)."""

    target: str
    host: str
    exit_code: Optional[int] = None
    run_dir: Optional[str] = None
    error: Optional[str] = None
    kind: Optional[str] = None
    profile: Optional[str] = None


# paired.tsv: one PairedRow per line (block_ratios: B/A per block, comma-joined in block order)
PAIRED_COLUMNS = ["engine", "reference", "n", "metric", "n_blocks", "ratio", "low", "high", "half_width_pct", "outcome", "blocks_needed", "block_ratios"]
PAIRED_TYPES = {"n": Point, "n_blocks": int, "ratio": float, "low": float, "high": float, "half_width_pct": float, "blocks_needed": int, "block_ratios": list}


# ------------------------------------------------------------------ side files of a run (read by the report)


class Hardware(msgspec.Struct):
    """hardware.json (parity.gpu.hardware)."""

    hardware_class: Optional[str] = None
    gpus: list[dict[str, Any]] = field(default_factory=list)
    cuda_version: Optional[str] = None
    cpu: Optional[dict[str, Any]] = None
    host: Optional[str] = None


class GateCheck(msgspec.Struct):
    check: str
    status: str
    kind: Optional[str] = None
    expected: Any = None
    got: Any = None
    data: Optional[dict[str, Any]] = None
    attempts: list[dict[str, Any]] = field(default_factory=list)


class GateSet(msgspec.Struct):
    """One phase of gates.json (pre, post): its status and checks."""

    status: str = ""
    phase: Optional[str] = None
    checks: list[GateCheck] = field(default_factory=list)


Gates = dict[str, Union[str, GateSet]]  # gates.json: {"pre": GateSet, "post": GateSet, "status": "pass"}


class Source(msgspec.Struct):
    """Where a build's llama.cpp came from (builds.json source)."""

    kind: Optional[str] = None
    pin: Optional[str] = None
    package: Optional[str] = None
    path: Optional[str] = None
    url: Optional[str] = None
    sha256: Optional[str] = None


class BuildRecord(msgspec.Struct):
    """One engine of builds.json: a build's provenance, a prebuilt bin dir, or a vLLM venv."""

    engine: Optional[str] = None
    kind: Optional[str] = None
    key: Optional[str] = None
    prebuilt: Optional[str] = None
    bin_dir: Optional[str] = None
    source: Optional[Source] = None
    series_dir: Optional[str] = None
    series_digest: Optional[str] = None
    patches: list[dict[str, Any]] = field(default_factory=list)
    tree_before: Optional[str] = None
    tree_after: Optional[str] = None
    expected_tree: Optional[str] = None
    cuda_archs: Optional[str] = None
    cmake_configure: list[str] = field(default_factory=list)
    vllm: Optional[dict[str, Any]] = None


Builds = dict[str, BuildRecord]


class Bucket(msgspec.Struct):
    bucket: str
    total_ms: Number = None
    share: Number = None
    ms_per_launch: Number = None


class Capture(msgspec.Struct):
    label: Optional[str] = None
    engine: Optional[str] = None
    total_ms: Number = None
    buckets: list[Bucket] = field(default_factory=list)
    unmatched_top: list[Any] = field(default_factory=list)


class Difference(msgspec.Struct):
    formula: Optional[str] = None
    total: Optional[dict[str, Any]] = None
    buckets: list[dict[str, Any]] = field(default_factory=list)


class Analysis(msgspec.Struct):
    """profile/analysis.json (parity.profiles.analysis): kernel buckets per capture, the difference method."""

    FINITE: ClassVar[tuple[str, ...]] = ("captures", "difference")
    captures: list[Capture] = field(default_factory=list)
    difference: list[Difference] = field(default_factory=list)
    note: Optional[str] = None
