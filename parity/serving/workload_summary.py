"""A workload run's rows -> the snapshot's summary machinery (medians over valid repeats
per engine x point, ratios against the reference engine with the noise rule's verdict)
over the kind's metrics, and its files: summary.json (with "workload") and
parity_summary.tsv (every row, median and ratio, the kind's columns), and the paired
block statistics of the kind's headline metrics ("paired", paired.tsv) beside the rule.  The users'
summary.tsv is the closed N sweep's layout, so a workload run does not write one."""

from __future__ import annotations

from parity import results, stats, tables
from parity.serving import summary
from parity.metrics import energy
from parity.metrics.registry import definitions
from parity.metrics.serving import METRICS
from parity.results.model import Median, PointRow, Ratio, Verdict, point_rows
from parity.workloads import WORKLOADS


def keys(kind: str) -> list[str]:
    """The serving metrics, then the kind's own."""
    return list(METRICS) + list(WORKLOADS[kind].metrics)


def labelled(med: list[Median], rows: list[PointRow]) -> list[Median]:
    """Medians with their point label (and, for open loop, how many repeats held the rate)."""
    for m in med:
        rs = [r for r in rows if r.engine == m.engine and r.n == m.n]
        m.put("point", rs[0].point if rs else None)
        held = [r.get("held") for r in rs if r.valid and "held" in r]  # True, False or None (not judged)
        if held:
            m.put("held", all(held) if None not in held else None)
            m.put("held_repeats", f"{sum(h is True for h in held)}/{len(held)}")
    return med


def verdict_said(v: Verdict, cell: str) -> str:
    """The users' rule's word, and for "missing" why (e.g. a control median of 0: no ratio)."""
    if v.verdict != stats.MISSING or not v.reason:
        return v.verdict
    return f"{v.verdict}: {v.reason.removeprefix(cell + ': ')}"


def headline(rat: list[Ratio], kind: str) -> str:
    parts = []
    for r in rat:
        bits = []
        for k in WORKLOADS[kind].headline:
            v, p, x = r.verdicts.get(k), r.paired.get(k) or {}, r.metric(k)
            pt = f"paired {p['outcome']} [{p['low']:.4f}, {p['high']:.4f}]" if p.get("low") is not None else ""
            said = "; ".join(w for w in (verdict_said(v, summary.cell_name(k, r.engine, r.n)) if v else None, pt) if w)
            bits.append(f"{k} {'-' if x is None else x}x" + (f" ({said})" if v or pt else ""))
        noise = "" if r.verdicts else f" [{r.noise}]"
        parts.append(f"{r.engine}/{r.reference} {r.point or r.n}: " + ", ".join(bits) + noise)
    return "; ".join(parts)


def tsv(rows: list[PointRow], med: list[Median], rat: list[Ratio], kind: str) -> str:
    cols = ["kind", "engine", "n", "point", "repeat", "reference", "valid", "held", *keys(kind), "requests", "valid_requests", "invalid_requests", "noise"]
    parts = (("row", [r.flat() for r in point_rows(rows)]), ("median", [m.flat() for m in med]),
             ("ratio", [r.flat() for r in rat]))
    items = [{**r, "kind": k, **({"repeat": "median"} if k == "median" else {})} for k, part in parts for r in part]
    return tables.tsv(cols, items)


def write(plan, rd, rows: list[PointRow] | list[dict], extra: dict | None = None) -> dict:
    """summary.json, parity_summary.tsv and paired.tsv in the run directory rd (plan.stats: the
    rules); returns summary.json as written."""
    rows = point_rows(rows)
    wl = plan.workload
    kind = WORKLOADS[wl.kind]
    med = labelled(summary.medians(rows, keys(wl.kind), kind.headline), rows)
    st = plan.stats
    rule = stats.Rule.from_config(st)
    rat = summary.ratios(rows, med, plan.reference, rule, kind.headline)
    points = {m.n: m.point for m in med}
    for r in rat:
        r.put("point", points.get(r.n))
    pts = summary.paired_points(rows, plan.reference, energy.paired_beside(kind.headline, rows), st.min_delta_pct,
                                st.confidence)
    for p in pts:
        p["point"] = points.get(p["n"])
    invalid = [f"{r.engine} r{r.repeat} {r.point}: {'; '.join(r.invalid_reasons)}" for r in rows if not r.valid]
    not_held = [f"{r.engine} r{r.repeat} {r.point}: {r.info['held_note']}" for r in rows if r.info.get("held") is False]
    coarse = [f"{r.engine} r{r.repeat} {r.point}: {r.info['coarse_note']}" for r in rows if r.info.get("coarse_note")]
    doc = {
        **summary.head(plan),
        "workload": wl.describe(),
        "rows": rows,
        "medians": med,
        "ratios": rat,
        "headline": headline(rat, wl.kind),
        "shown": list(kind.shown),  # the columns the CLI prints and the report shows first
        "invalid_points": invalid,
        "not_held": not_held,
        "coarse_streams": coarse,
        "valid": not invalid,
        "rule": rule.text(),
        "paired": pts,
        "paired_rule": summary.paired_rule(st.min_delta_pct, st.confidence),
        "metrics": definitions(keys(wl.kind)),
        **kind.summarize(rows, plan.reference, st.min_delta_pct, st.confidence),  # the kind's own (fits across its points)
        **(extra or {}),
    }
    doc = results.write_summary(rd, doc)  # rows, medians and ratios written flat (model.Flat.flat)
    rd.write_text("parity_summary.tsv", tsv(rows, med, rat, wl.kind))
    rd.write_text("paired.tsv", summary.paired_tsv(pts))
    return doc
