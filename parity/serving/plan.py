"""What a snapshot is asked (SnapshotRequest) and the sweep it runs (SnapshotPlan): built and
checked once by parity.serving.snapshot.make_plan, then handed to every measuring function with
the run (parity.context.Run).  The plan holds the engines bound once (parity.engines.bound), so
nothing below make_plan looks an engine up by name."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from parity.engines.bound import Engine


@dataclass
class SnapshotPlan:
    model: str
    engines: list[str]
    reference: str | None
    npl: list[int]
    repeat: int
    shape: Any  # ServingConfig with overrides
    order: list[tuple[int, str]]  # (repeat, engine) in execution order
    limits: dict[str, int] = field(default_factory=dict)  # engine -> tokens one request may use (prompt + generated)
    limit_what: dict[str, str] = field(default_factory=dict)  # engine -> what sets that limit, in words
    workload: Any = None  # parity.serving.workloads.Workload: its points replace the N sweep
    budget: Any = None  # parity.stats.adaptive.Budget: how many blocks (fixed, or --until-ci)
    calibrate: Any = None  # serving.calibrate when the trial block may raise gen (None: gen as given)
    calibration_off: str | None = None  # why the trial block may not raise gen (or a workload's field); None: it may
    calibration: dict | None = None  # what the calibration chose, with its evidence (summary.json "calibration")
    trial_arms: list = field(default_factory=list)  # the calibration trial's arms when it did not count
    stop: dict | None = None  # which stop rule ended the sweep (summary.json "stop")
    canary: dict | None = None  # the drift canary's samples and flagged blocks (summary.json "canary")
    sized: str | None = None  # --parallel raised to the largest N (parity.serving.slots), in words
    bound: dict[str, Engine] = field(default_factory=dict)  # engine name -> the engine resolved once
    model_files: dict[str, str] = field(default_factory=dict)  # engine -> what its server is given for the model
    model_path: str | None = None  # models.<model>.path when the model is a profile model
    stats: Any = None  # the profile's stats section (the noise rule, paired statistics, stop rule, canary)
    gpus: list[int] = field(default_factory=list)  # crossover's GPUs (parity.serving.crossover); empty: arms in turn
    placement: list[dict] = field(default_factory=list)  # crossover, as run: per block {"block": k, engine: GPU}
    cores: dict[int, dict] = field(default_factory=dict)  # crossover: GPU -> its arm's affinity plan (cpu_shares)


@dataclass
class SnapshotRequest:
    """What `parity snapshot` (or a campaign's snapshot step) asks for; None keeps the profile's value."""

    npl: list[int] | None = None
    engines: list[str] | None = None
    model: str | None = None
    repeat: int | None = None
    ptok: int | None = None
    gen: int | None = None
    parallel: int | None = None
    ctx: int | None = None
    order: str | None = None
    gates: bool = True
    allow_env: list[str] = field(default_factory=list)
    dry_run: bool = False
    workload: str | dict | None = None  # a built-in kind or serving.workloads.NAME (or a campaign's inline mapping)
    workload_opts: list[str] = field(default_factory=list)  # --workload-opt KEY=VALUE
    trace: str | None = None  # --trace FILE: the trace workload on this request trace (--workload trace implied)
    # adaptive repeats: PCT or METRIC=PCT,... (None: stats.until_ci_pct / until_ci_targets)
    until_ci: float | str | None = None
    max_repeats: int | None = None  # None: stats.max_repeats
    budget_s: float | None = None  # None: stats.budget_s
    gpus: str | list[int] | None = None  # --gpus 0,1: crossover (parity.serving.crossover); None: serving.gpus
