"""The metric registry: the serving metrics and the workloads' own, each declared once
(parity.metrics.serving, parity.metrics.workload); reports print their definitions from here."""

from __future__ import annotations

from typing import Sequence

from parity.metrics.serving import METRICS, Metric
from parity.metrics.workload import WORKLOAD_METRICS


def all_metrics() -> dict[str, Metric]:
    """These and the workloads' own (parity.metrics.workload), declared the same way."""
    return {**METRICS, **WORKLOAD_METRICS}


def definitions(names: Sequence[str] | None = None) -> list[dict]:
    return [{"name": m.name, "unit": m.unit, "better": m.better, "formula": m.formula} for n, m in all_metrics().items() if names is None or n in names]


def render_definitions(names: Sequence[str] | None = None) -> str:
    return "\n".join(f"{d['name']} [{d['unit']}, {d['better']} is better]: {d['formula']}" for d in definitions(names))


def direction(metric: str) -> str:
    """'higher' or 'lower' is better: declared here, else guessed from a time unit suffix."""
    known = all_metrics()
    if metric in known:
        return known[metric].better
    return "lower" if metric.endswith(("_ms", "_s")) else "higher"
