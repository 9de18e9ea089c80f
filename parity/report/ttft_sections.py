"""The report's TTFT section: the anatomy of each point's time to first token (summary.json "ttft",
parity.ttft), the flagged points, and each part paired engine / reference.  Rendered, not computed:
a run written before the anatomy existed has no section."""

from __future__ import annotations

import math

from parity.errors import UsageError
from parity.report.rundata import RunData
from parity.report.sections import fmt
from parity.ttft.parts import PARTS, definitions


def _cell(p: dict | None) -> str:
    if not p or p.get("mean") is None:
        return "-"
    share = f" ({p['share'] * 100:.0f}%)" if isinstance(p.get("share"), (int, float)) else ""
    tail = f" / p99 {fmt(p['p99'])}" if p.get("p99") is not None else ""
    return f"{fmt(p['mean'])}{tail}{share}"


def _interval(c: dict) -> str:
    if c.get("ratio") is None:
        return f"- ({c.get('reason') or 'no ratio'})"
    if c.get("low") is None or c.get("high") is None:
        return f"{c['ratio']:.4f} ({c.get('reason')})"
    return f"{c['ratio']:.4f} [{c['low']:.4f}, {c['high']:.4f}] {c.get('outcome')} ({c.get('n_blocks')} blocks)"


def _num(v) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v))


def problem(t) -> str | None:
    """What makes summary.json's "ttft" unreadable (None: fine): the report refuses it in one line."""
    if not isinstance(t, dict) or not all(isinstance(t.get(k, []), list) for k in ("points", "paired")):
        return "ttft is not {points: [...], paired: [...]}"
    for i, p in enumerate(t.get("points") or []):
        if not isinstance(p, dict) or not isinstance(p.get("engine"), str) or not _num(p.get("n")) \
                or not isinstance(p.get("parts"), dict):
            return f"ttft.points[{i}] is not an entry {{engine, n, parts}}"
        for k, v in p["parts"].items():
            if v is not None and (not isinstance(v, dict) or not all(_num(v.get(f)) for f in ("mean", "p99", "share"))):
                return f"ttft.points[{i}].parts.{k} is not {{mean, p99, share}} numbers"
        if not _num(p.get("ttft_mean_ms")):
            return f"ttft.points[{i}].ttft_mean_ms is not a number"
    for i, c in enumerate(t.get("paired") or []):
        if not isinstance(c, dict) or not all(_num(c.get(f)) for f in ("ratio", "low", "high")):
            return f"ttft.paired[{i}] is not an entry {{ratio, low, high}} of numbers"
    return None


def ttft_section(rd: RunData) -> dict | None:
    t = (rd.summary or {}).get("ttft")
    if t is None:
        return None
    bad = problem(t)
    if bad:
        raise UsageError(f"{rd.path / 'summary.json'}: {bad}: cannot report it")
    if not t.get("points"):
        return None
    rows = [[p["engine"], p["n"], p.get("repeats"), fmt(p.get("ttft_mean_ms")),
             *(_cell(p["parts"].get(k)) for k in PARTS), p.get("held_by") or "-", p.get("source") or "-"]
            for p in t["points"]]  # fmt: skip
    paired = [[c.get("engine"), c.get("reference"), c.get("n"), c.get("part"), _interval(c)]
              for c in t.get("paired") or [] if c.get("ratio") is not None]  # fmt: skip
    headers = ["engine", "N", "repeats", "TTFT mean ms", *(f"{k} ms" for k in PARTS), "held by", "source"]
    return {"headers": headers, "rows": rows, "flags": t.get("flags") or [], "paired": paired,
            "definitions": [[d["name"], d["formula"]] for d in definitions()]}
