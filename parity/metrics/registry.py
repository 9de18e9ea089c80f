"""The metric registry: the serving metrics and the workloads' own, each declared once
(parity.metrics.serving, parity.metrics.workload) with its roles; reports print their
definitions from here, and every table, summary, verdict and check that lists metrics asks
here which metrics have a role, in its order, instead of keeping its own list.  Read at
call time: a metric added to the declarations is in every one of them."""

from __future__ import annotations

from typing import Callable, Sequence

from parity.metrics.energy import ENERGY_METRICS
from parity.metrics.serving import METRICS, Metric
from parity.metrics.workload import WORKLOAD_METRICS


def all_metrics() -> dict[str, Metric]:
    """These, the workloads' own (parity.metrics.workload) and energy's, declared the same way."""
    return {**METRICS, **WORKLOAD_METRICS, **ENERGY_METRICS}


def definitions(names: Sequence[str] | None = None) -> list[dict]:
    return [{"name": m.name, "unit": m.unit, "better": m.better, "formula": m.formula}
            for n, m in all_metrics().items() if names is None or n in names]


def render_definitions(names: Sequence[str] | None = None) -> str:
    return "\n".join(f"{d['name']} [{d['unit']}, {d['better']} is better]: {d['formula']}" for d in definitions(names))


def direction(metric: str) -> str:
    """'higher' or 'lower' is better: declared here, else guessed from a time unit suffix."""
    known = all_metrics()
    if metric in known:
        return known[metric].better
    return "lower" if metric.endswith(("_ms", "_s")) else "higher"


# ------------------------------------------------------------------ the metrics' roles (parity.metrics.serving.Metric)


def _ranked(rank: Callable[[Metric], int | None]) -> list[str]:
    return [m.name for m in sorted((m for m in all_metrics().values() if rank(m) is not None), key=rank)]


def row_metrics() -> list[str]:
    """Every serving metric a point's row carries, in declaration order (parity_summary.tsv's columns)."""
    return list(METRICS)


def headline() -> list[str]:
    """The verdict's metrics, first the one a verdict line reads: stats.metrics' default, the
    sweep's ratios and spreads."""
    return _ranked(lambda m: m.headline)


def columns() -> list[str]:
    """The report's results table (medians of valid repeats), in column order."""
    return _ranked(lambda m: m.column)


def console_columns() -> list[str]:
    """`parity snapshot`'s own medians table: the results columns it shows."""
    return [n for n in columns() if all_metrics()[n].console]


def compared() -> list[str]:
    """The results columns also set engine against engine and host against host (the report's
    ratio table after the headline, the matrix report)."""
    return [n for n in columns() if all_metrics()[n].compared]


def users_columns() -> list[str]:
    """The users' summary.tsv after `arm n` (their write_summary), in their order."""
    return _ranked(lambda m: m.users)


def users_ratios() -> dict[str, str]:
    """metric -> its name in the users' ratio block (<engine>_<name>_over_<reference>), in
    headline order."""
    named = [m for m in all_metrics().values() if m.users_ratio]
    named.sort(key=lambda m: (m.headline is None, m.headline or 0))
    return {m.name: m.users_ratio for m in named}


def per_round() -> list[str]:
    """The metrics of a round as a whole (its windows, rates, totals): over several rounds, their mean."""
    return [m.name for m in METRICS.values() if m.per_round]


def unknown(names: Sequence[str]) -> list[str]:
    """The names that no declaration (all_metrics) holds."""
    known = all_metrics()
    return [n for n in names if n not in known]
