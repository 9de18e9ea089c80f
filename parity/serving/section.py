"""The serving section's checks (config.ServingConfig): names it refers to, sizes, bounds, its
workloads (each checked by its kind), warmup, telemetry, output parity, calibration."""

from __future__ import annotations

import math

from parity.errors import ConfigError
from parity.options import positive_int
from parity.workloads.spec import BUILTIN, check_workload

POSITIVE = ("ptok", "gen", "parallel", "ctx", "repeat", "request_timeout_s", "settle_timeout_s", "min_requests")
NOT_NEGATIVE = ("min_window_s", "settle_s", "settle_tolerance_mib")


def check_serving(s, label: str, key: str, models, engines) -> None:
    """`models` and `engines`: the profile's model and engine names the section may refer to.
    A workload named after a built-in kind and given no kind: takes that kind."""
    if s.model and s.model not in models:
        raise ConfigError(label, f"{key}.model", f"unknown model {s.model!r}")
    for e in s.engines:
        if e not in engines:
            raise ConfigError(label, f"{key}.engines", f"unknown engine {e!r} (known: {', '.join(engines)})")
    if s.reference_engine and s.reference_engine not in engines:
        raise ConfigError(label, f"{key}.reference_engine", f"unknown engine {s.reference_engine!r}")
    if not s.npl or any(v <= 0 for v in s.npl):
        raise ConfigError(label, f"{key}.npl", "must be a non-empty list of positive integers")
    for name in POSITIVE:
        if getattr(s, name) <= 0:
            raise ConfigError(label, f"{key}.{name}", "must be positive")
    for name in NOT_NEGATIVE:
        if getattr(s, name) < 0:
            raise ConfigError(label, f"{key}.{name}", "must not be negative")
    if any(g < 0 for g in s.gpus) or len(set(s.gpus)) != len(s.gpus) or len(s.gpus) == 1:
        raise ConfigError(label, f"{key}.gpus", "must list two or more distinct GPU indices >= 0 (crossover), or none")
    if not 0 <= s.invalid_tolerance < 1:
        raise ConfigError(label, f"{key}.invalid_tolerance", "must be a share in [0, 1)")
    for wname, w in s.workloads.items():
        if w.kind is None:
            if wname not in BUILTIN:
                raise ConfigError(label, f"{key}.workloads.{wname}.kind", "required key is missing (or name the "
                                  f"workload after a built-in kind to override its fields: {', '.join(BUILTIN)})")
            w.kind = wname
        check_workload(w, label, f"{key}.workloads.{wname}")
    _check_subsections(s, label, key)


def _check_subsections(s, label: str, key: str) -> None:
    """serving.warmup, serving.telemetry, serving.output_parity."""
    if s.warmup.requests < 0 or s.warmup.gen <= 0 or s.warmup.point_requests < 0:
        raise ConfigError(label, f"{key}.warmup", "requests and point_requests must be >= 0 (0: none) and gen positive")
    t = s.telemetry
    if t.interval_s > 0 and not 0 < t.power_interval_s <= t.interval_s:  # interval_s itself: config.check_bounds
        raise ConfigError(label, f"{key}.telemetry.power_interval_s", f"must be > 0 and <= {key}.telemetry.interval_s "
                          f"({t.interval_s:g}), got {t.power_interval_s:g}")
    if t.client_cpus < 1 or t.pin_min_cpus < t.client_cpus + 1:
        raise ConfigError(label, f"{key}.telemetry", "client_cpus must be >= 1 and pin_min_cpus leave the server at "
                          "least one core (pin_min_cpus > client_cpus)")
    op = s.output_parity
    if op.enabled and (not op.prompts or op.gen <= 0 or op.top_logprobs < 1 or not 0 <= op.min_agreement <= 1
                       or op.max_kl < 0):
        raise ConfigError(label, f"{key}.output_parity",
                          "needs prompts, gen > 0, top_logprobs >= 1, min_agreement in [0, 1], max_kl >= 0")


def check_calibrate(c, label: str, key: str) -> None:
    """serving.calibrate (config.CalibrateConfig)."""
    if not (math.isfinite(c.margin) and c.margin >= 1):
        raise ConfigError(label, f"{key}.margin", "must be >= 1 (the share of min_window_s a window must reach)")
    if not positive_int(c.max_gen):
        raise ConfigError(label, f"{key}.max_gen", "must be a positive number of tokens")
