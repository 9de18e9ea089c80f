"""The Pareto frontier per engine: output throughput per GPU against the decode rate one user
sees, at each load the blocks probed, each with a t interval over the blocks (plain data: the
report plots and tables it)."""

from __future__ import annotations

from parity.capacity.curves import geo_interval


def frontier(probes, engine: str, confidence: float = 0.95) -> list[dict]:
    """probes: the search's Probed list; the blocks' probes of `engine` (bracket probes, block < 0,
    are single unpaired looks: left out).  A point is on the frontier when no other load gives
    both more throughput and a faster per-user rate."""
    by_load: dict = {}
    for p in probes:
        if p.engine == engine and p.block >= 0:
            by_load.setdefault(p.load, []).append(p)
    rows = []
    for load in sorted(by_load):
        ps = by_load[load]
        tp = geo_interval([p.throughput_tps for p in ps], confidence)
        user = geo_interval([p.user_tps for p in ps], confidence)
        rows.append({"load": load, "blocks": tp["n"], "throughput_tps_per_gpu": rnd(tp), "user_tps": rnd(user)})
    for r in rows:
        t, u = r["throughput_tps_per_gpu"]["value"], r["user_tps"]["value"]
        r["pareto"] = t is not None and u is not None and not any(
            o is not r and o["throughput_tps_per_gpu"]["value"] is not None and o["user_tps"]["value"] is not None
            and o["throughput_tps_per_gpu"]["value"] >= t and o["user_tps"]["value"] >= u
            and (o["throughput_tps_per_gpu"]["value"] > t or o["user_tps"]["value"] > u)
            for o in rows
        )  # fmt: skip
    return rows


def rnd(d: dict) -> dict:
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in d.items()}
