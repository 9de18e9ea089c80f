"""Energy per token in a capacity run: per engine the median over its block probes, and per
engine against the reference a paired ratio over blocks.  J per token depends on the load (a
fuller batch spends less per token), so a block pairs only the loads both engines probed in it:
its value per engine is the geometric mean over those loads, the same loads for both."""

from __future__ import annotations

import statistics

from parity.stats import usable
from parity.stats.paired import paired

QUANTITIES = ("j_per_output_tok", "j_per_total_tok")


def number(x) -> bool:
    """A J per token the logs can take (parity.stats.usable, and above 0)."""
    return usable(x) and x > 0


def per_engine(probes: list[dict], engines: list[str]) -> dict:
    """Per engine: the median J per output token over its block probes, or why there is none."""
    out = {}
    for e in engines:
        mine = [p for p in probes if p["engine"] == e and p["block"] >= 0]
        j = [p["j_per_output_tok"] for p in mine if number(p["j_per_output_tok"])]
        why = next((p["energy_why"] for p in mine if p["energy_why"]), None)
        out[e] = {"j_per_output_tok_median": statistics.median(j) if j else None, "probes": len(j),
                  "why": None if j else why}  # fmt: skip
    return out


def block_values(probes: list[dict], engine: str, reference: str, quantity: str) -> tuple[dict, dict, dict]:
    """{block: value} for the reference and the engine, and {block: the loads paired}: per block the
    geometric mean over the loads at which both have a number (a load probed twice: its median)."""
    got: dict = {}
    for p in probes:
        if p["block"] >= 0 and p["engine"] in (engine, reference) and number(p.get(quantity)):
            got.setdefault((p["block"], p["load"]), {}).setdefault(p["engine"], []).append(p[quantity])
    ref, eng, loads = {}, {}, {}
    for b in sorted({b for b, _ in got}):
        both = sorted(x for (bb, x), v in got.items() if bb == b and engine in v and reference in v)
        if not both:
            continue
        gm = {e: statistics.geometric_mean(statistics.median(got[(b, x)][e]) for x in both) for e in (engine, reference)}
        ref[b], eng[b], loads[b] = gm[reference], gm[engine], both
    return ref, eng, loads


def paired_ratios(probes: list[dict], engines: list[str], reference: str, threshold_pct: float,
                  confidence: float) -> list[dict]:
    """Per engine other than the reference and per quantity: J per token engine / reference paired
    by block (lower is better), with its interval and three-way outcome; a block with no load that
    both engines probed with a number does not count."""
    out = []
    for e in engines:
        if e == reference:
            continue
        for q in QUANTITIES:
            a, b, loads = block_values(probes, e, reference, q)
            pr = paired(a, b, "lower", threshold_pct, confidence)
            out.append({"engine": e, "reference": reference, "quantity": q,
                        "loads": {str(k): v for k, v in loads.items()}, **pr.to_dict()})  # fmt: skip
    return out
