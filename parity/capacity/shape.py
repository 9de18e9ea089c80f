"""Whether an engine's output rate rises with its load, as a capacity search assumes.  On a lent
H200 (docs/evidence/device-h200-1129b/) llama-server on a 4 GB f16 model made ~1,020 tok/s at 3
clients, ~730 at 6 and ~1,750 at 8: a step cost about in proportion to its batch between 3 and 6.
There the latency objective's margin can cross 0 more than once, and a bracket that doubles and
bisects finds one crossing without knowing of the others."""

from __future__ import annotations

import statistics

from parity.capacity.estimate import Probed

DROP = 0.10  # a fall of the median output rate past this share of a lower load's is named,
SPAN = 1.5  # between loads at least this far apart: near a capacity the rate is flat, and probe drift moves it


def falling_output(probes: list[Probed], engine: str, drop: float = DROP, span: float = SPAN) -> str | None:
    """One line naming the largest fall of the engine's output rate between a lower load and one at
    least `span` times it (medians over its probes at each load), or None where the rate never fell
    by more than `drop` of a lower load's."""
    by_load: dict[float, list[float]] = {}
    for p in probes:
        if p.engine == engine and p.throughput_tps is not None and p.throughput_tps > 0:
            by_load.setdefault(p.load, []).append(p.throughput_tps)
    rates = sorted((load, statistics.median(v)) for load, v in by_load.items())
    worst = None
    for i, (lo, rate_lo) in enumerate(rates):
        for hi, rate_hi in rates[i + 1:]:
            fall = 1 - rate_hi / rate_lo
            if hi >= span * lo and fall > drop and (worst is None or fall > worst[0]):
                worst = (fall, lo, rate_lo, hi, rate_hi)
    if worst is None:
        return None
    fall, lo, rate_lo, hi, rate_hi = worst
    return (f"{engine}: the output rate fell {fall * 100:.0f} % from {rate_lo:,.0f} tok/s at load {lo:g} to "
            f"{rate_hi:,.0f} at {hi:g}: a step cost more than its batch gained, so an objective's margin can cross "
            "0 at more than one load and this capacity is one of them (docs/CAPACITY.md)")
