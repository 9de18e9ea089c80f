"""Energy per token, declared like the serving metrics (parity.metrics.serving: name, unit,
direction, the formula in words, the function), and included in the registry's definitions.

A metric reads an EnergySample: the joules the GPU's energy counter measured over the point's
measured window (parity.telemetry.energy, summed over the GPUs the engine uses) and the tokens
of every request of the point (all rounds; a request judged invalid still cost its energy).
Without joules it raises NoValue with the reason ("not applicable: ..."), never a 0."""

from __future__ import annotations

import math

import msgspec

from parity.metrics.serving import Metric, NoValue
from parity.results.model import PointRow


class EnergySample(msgspec.Struct, frozen=True):
    joules: float | None  # the counter's joules over the window; None: not measured
    why: str | None  # why there are no joules
    output_tokens: int  # streamed tokens, counted by the client
    prompt_tokens: int  # usage.prompt_tokens (else what was sent)


def _per(s: EnergySample, tokens: int, what: str) -> float:
    if s.joules is None:
        raise NoValue(s.why or "not applicable: no energy measured")
    if tokens <= 0:
        raise NoValue(f"no {what} token in the point")
    return s.joules / tokens


ENERGY_METRICS: dict[str, Metric] = {
    m.name: m
    for m in [
        Metric("j_per_output_tok", "J/tok", "lower",
               "GPU energy over the point's measured window (NVML energy counter at its end - at its start, summed "
               "over the GPUs the engine uses) / output tokens of every request of the point",
               lambda s: _per(s, s.output_tokens, "output")),
        Metric("j_per_total_tok", "J/tok", "lower",
               "the same GPU energy / (prompt + output) tokens of every request of the point",
               lambda s: _per(s, s.prompt_tokens + s.output_tokens, "prompt or output")),
    ]
}


def compute(sample: EnergySample) -> tuple[dict, dict]:
    """(row, why) as parity.metrics.serving.compute; six significant digits (a J/tok is often < 0.1)."""
    row, why = {}, {}
    for name, m in ENERGY_METRICS.items():
        try:
            v = m.fn(sample)
            row[name] = float(f"{v:.6g}") if math.isfinite(v) else None
            if row[name] is None:
                why[name] = "not a finite number"
        except NoValue as e:
            row[name], why[name] = None, str(e)
    return row, why


def paired_beside(metrics, rows: list[PointRow]) -> list[str]:
    """metrics, then the energy metrics not among them that some valid row has a number for: what a
    summary pairs (a sweep's stats.metrics, a workload kind's headline), J/token where it was measured."""
    return [*metrics, *(n for n in ENERGY_METRICS
                        if n not in metrics and any(r.valid and r.metric(n) is not None for r in rows))]
