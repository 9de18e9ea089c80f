"""Latency objectives and a probe's margin to each.

An objective is `<quantity>_p<q>_ms=<limit>`: q % of the probe's samples within `limit` ms, the
same as the point's `<quantity>_p<q>_ms` (parity.metrics.serving) at most `limit`.  Quantities:
`ttft` (per request), `itl` (per generated token after the first, pooled over requests),
`tpot` and `e2e` (per request).  `<quantity>_ms=<limit>` takes the attainment level (default
99: `ttft_ms=500` is `ttft_p99_ms=500`).  Each objective is judged on its own; the engine's
capacity is the lowest of its objectives' capacities, and that objective binds.

The margin of a probe to an objective is log(limit / the probe's q-th percentile): positive
while the objective holds, 0 where q % of the samples are exactly within the limit (where
the attainment, the share within the limit, crosses the target), continuous in the load where
the attainment moves in steps of one request (docs/CAPACITY.md)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from parity.errors import UsageError

QUANTITIES = {"ttft": "ttft_ms", "itl": "itl_ms", "tpot": "tpot_ms", "e2e": "e2e_ms"}  # objective -> Requests field
NAME = re.compile(r"^(?P<q>[a-z0-9]+?)(?:_p(?P<pct>\d+(?:\.\d+)?))?_ms$")


@dataclass(frozen=True)
class Objective:
    quantity: str  # ttft | itl | tpot | e2e
    pct: float  # the share of samples that must be within the limit, %
    limit_ms: float

    @property
    def name(self) -> str:
        return f"{self.quantity}_p{self.pct:g}_ms"

    def values(self, requests):
        return getattr(requests, QUANTITIES[self.quantity])

    def margin(self, requests) -> float | None:
        """log(limit / q-th percentile); None when the probe has no sample of this quantity."""
        import numpy as np

        v = self.values(requests)
        if not len(v):
            return None
        q = float(np.percentile(v, self.pct))
        return math.log(self.limit_ms / q) if q > 0 else math.inf

    def attainment(self, requests) -> float | None:
        """The share of samples within the limit (what the target is a level of)."""
        v = self.values(requests)
        return float((v <= self.limit_ms).mean()) if len(v) else None

    def describe(self) -> str:
        return f"{self.pct:g} % of {self.quantity} within {self.limit_ms:g} ms"


def parse_slo(text: str, attainment: float = 99.0, where: str = "--slo") -> list[Objective]:
    """`ttft_p99_ms=500,itl_p99_ms=50` -> objectives; a one-line UsageError names a bad one."""
    if not 0 < attainment < 100:
        raise UsageError(f"--attainment {attainment:g}: must be a percentage strictly between 0 and 100")
    out: list[Objective] = []
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        name, eq, limit = part.partition("=")
        m = NAME.match(name.strip())
        if not eq or not m or m.group("q") not in QUANTITIES:
            raise UsageError(f"{where} {part!r}: expected <quantity>[_p<q>]_ms=<limit> with quantity one of "
                             f"{', '.join(QUANTITIES)} (e.g. ttft_p99_ms=500)")
        pct = float(m.group("pct")) if m.group("pct") else attainment
        if not 0 < pct < 100:
            raise UsageError(f"{where} {part!r}: the percentile must be strictly between 0 and 100")
        try:
            lim = float(limit)
        except ValueError:
            raise UsageError(f"{where} {part!r}: the limit {limit!r} is not a number of ms") from None
        if not math.isfinite(lim) or lim <= 0:
            raise UsageError(f"{where} {part!r}: the limit must be a finite number of ms > 0")
        obj = Objective(m.group("q"), pct, lim)
        if any(o.name == obj.name for o in out):
            raise UsageError(f"{where}: {obj.name} named twice")
        out.append(obj)
    if not out:
        raise UsageError(f"{where}: no objective (e.g. {where} ttft_p99_ms=500,itl_p99_ms=50)")
    return out
