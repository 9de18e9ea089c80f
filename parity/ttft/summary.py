"""The anatomy across a sweep: per engine x N the median over valid repeats of each part's mean and
p99 (rows' ttft_anatomy), the flags, each part paired engine / reference over the blocks
(parity.stats.paired), and which part keeps a TTFT interval wide (the stop rule's note)."""

from __future__ import annotations

import statistics

from parity.results.model import PointRow, point_rows
from parity.stats import finite
from parity.stats.paired import by_point
from parity.ttft.parts import PARTS, definitions
from parity.ttft.split import flag


def _key(part: str) -> str:
    return f"ttft_{part}_ms"


def _median(vals) -> float | None:
    v = finite(vals)
    return round(statistics.median(v), 3) if v else None


def _anatomy(r: PointRow) -> dict | None:
    return r.info.get("ttft_anatomy")


def _counted(rows: list[PointRow], engine: str, n) -> list[dict]:
    """The anatomies of the valid, not discarded rows of engine at N."""
    mine = [r for r in rows if r.engine == engine and r.n == n and r.valid and not r.discarded]
    return [a for r in mine if (a := _anatomy(r))]


def part_rows(rows: list[PointRow]) -> list[PointRow]:
    """One row per sweep row with each part's mean under ttft_<part>_ms (what the paired statistics read)."""
    out = []
    for r in rows:
        parts = (_anatomy(r) or {}).get("parts") or {}
        means = {_key(p): (parts.get(p) or {}).get("mean") for p in PARTS}
        info = {"discarded": r.discarded} if r.discarded else {}
        out.append(PointRow(r.engine, r.n, r.repeat, r.valid, metrics=means, info=info))
    return out


def points(rows: list[PointRow]) -> list[dict]:
    """Per engine x N: each part's median (over valid repeats) of mean and p99, its share, the flag."""
    out = []
    cells = {(r.engine, r.n) for r in rows if _anatomy(r)}
    for eng, n in sorted(cells, key=lambda k: (str(k[0]), k[1])):
        an = _counted(rows, eng, n)
        if not an:
            continue
        parts = {}
        for p in PARTS:
            cells = [a["parts"].get(p) or {} for a in an]
            parts[p] = {f: _median(c.get(f) for c in cells) for f in ("mean", "p99", "share")}
        ttft = _median((a.get("ttft") or {}).get("mean") for a in an)
        known = {p: v for p, v in parts.items() if v["mean"] is not None}
        doc = flag({"parts": known, "ttft": {"mean": ttft}, "why": {}})  # on the medians: one flag per point
        out.append({"engine": eng, "n": n, "repeats": len(an), "ttft_mean_ms": ttft, "parts": parts,
                    "source": an[-1].get("source"), "flagged_repeats": sum(bool(a.get("flag")) for a in an),
                    "outside_share": doc["outside_share"], "held_by": doc["held_by"], "flag": doc["flag"]})  # fmt: skip
    return out


def paired(rows: list[PointRow], reference: str | None, threshold_pct: float, confidence: float) -> list[dict]:
    """Each part engine / reference per N over the blocks (a part at 0 ms in a block has no ratio there)."""
    if not reference:
        return []
    cells = by_point(part_rows(rows), reference, [_key(p) for p in PARTS], lambda m: "lower", threshold_pct, confidence)
    keep = ("engine", "reference", "n", "ratio", "low", "high", "n_blocks", "outcome", "reason")
    return [{**{k: c.get(k) for k in keep}, "part": c["metric"][len("ttft_"):-len("_ms")]} for c in cells]


def noisiest(rows: list[PointRow], engine: str, reference: str | None, n) -> tuple[str, float] | None:
    """The part whose per-block mean spreads most (sample stdev, ms) over the valid repeats of this
    engine and the reference at N: what keeps the TTFT interval wide."""
    best = None
    for p in PARTS:
        spread = 0.0
        for e in {engine, reference} - {None}:
            vals = finite(((a.get("parts") or {}).get(p) or {}).get("mean") for a in _counted(rows, e, n))
            if len(vals) > 1:
                spread = max(spread, statistics.stdev(vals))
        if spread and (best is None or spread > best[1]):
            best = (p, spread)
    return best


def open_note(rows: list, reference: str | None, open_labels) -> str | None:
    """'<engine> N=<n>: its <part> part spreads most (sd X ms over blocks)' for the open ttft half-widths
    (rows: PointRows, or flat dicts)."""
    rows, notes = point_rows(rows), []
    for label in sorted(open_labels):
        parts = label.split(" ")
        if len(parts) != 3 or not parts[2].startswith("ttft") or not parts[1].startswith("N="):
            continue
        try:
            n = int(parts[1][2:])
        except ValueError:
            continue
        hit = noisiest(rows, parts[0], reference, n)
        if hit:
            notes.append(f"{parts[0]} N={n}: its {hit[0]} part spreads most (sd {hit[1]:.2f} ms over blocks)")
    return "; ".join(notes) or None


def section(rows: list, reference: str | None, threshold_pct: float, confidence: float) -> dict:
    """summary.json "ttft": the points, the paired parts, every flagged point, the definitions (rows:
    PointRows, or flat dicts)."""
    rows = point_rows(rows)
    pts = points(rows)
    return {"points": pts, "paired": paired(rows, reference, threshold_pct, confidence),
            "flags": [f"{p['engine']} N={p['n']}: {p['flag']}" for p in pts if p["flag"]], "definitions": definitions()}
