"""A sweep's rows -> medians over valid repeats, ratios against the reference engine
with the noise rule's verdict, and the files: summary.json, parity_summary.tsv (every
row, median and ratio) and summary.tsv in the users' own layout (their harness's
write_summary: arm, n, then the metrics whose declaration names their column; then the ratio
block), so their tools read it unchanged.

Beside the users' rule every ratio carries the paired block statistics
(parity.stats.paired: a block = one repeat in which every engine ran once; geometric
mean of the per-block ratios with a t interval on their logs), in summary.json
("paired", and per ratio row) and in paired.tsv."""

from __future__ import annotations

import math
import statistics

from parity import results, stats, tables
from parity.metrics import energy, validity
from parity.metrics import registry
from parity.metrics.registry import definitions, direction
from parity.results.model import Median, PointRow, Ratio, point_rows
from parity.stats.paired import METHOD, by_point


def medians(rows: list[PointRow] | list[dict], keys: list[str] | None = None,
            spread: list[str] | None = None) -> list[Median]:
    """Per engine x N: the median of each metric (keys; None: every serving metric) over the VALID
    repeats, with the min..max of the spread ones (None: the headline)."""
    rows = point_rows(rows)
    keys = registry.row_metrics() if keys is None else keys
    spread = registry.headline() if spread is None else spread
    out = []
    for eng, n in sorted({(r.engine, r.n) for r in rows}):
        rs = [r for r in rows if r.engine == eng and r.n == n]
        ok = [r for r in rs if r.valid]
        m = {"engine": eng, "n": n, "repeats": len(ok), "invalid_repeats": len(rs) - len(ok)}
        for k in keys:
            vals = [v for v in numbers(ok, k) if math.isfinite(v)]
            m[k] = round(statistics.median(vals), 4) if vals else None
        if len(ok) > 1:
            m["spread"] = {k: [min(v), max(v)] for k in spread if (v := numbers(ok, k))}
        out.append(Median.of(m))
    return out


PAIRED_KEYS = ("outcome", "ratio", "low", "high", "half_width_pct", "n_blocks", "blocks_needed", "reason")


def paired_entry(p: dict) -> dict:
    """The part of a paired.by_point row a ratio row carries beside the users' verdict."""
    return {k: p.get(k) for k in PAIRED_KEYS}


def paired_points(rows: list[PointRow], reference: str | None, metrics: list[str], threshold_pct: float,
                  confidence: float) -> list[dict]:
    """paired.by_point over the valid rows: engine/reference per block (repeat) x N x metric."""
    if not reference:
        return []

    return by_point(rows, reference, list(metrics), direction, threshold_pct, confidence)


def cell_name(metric: str, engine: str, n) -> str:
    """How a ratio's verdict names its cell (the prefix of a "missing" reason)."""
    return f"{metric} {engine} at {n}"


def ratios(rows: list[PointRow] | list[dict], med: list[Median], reference: str | None, rule: stats.Rule,
           metrics: list[str] | None = None) -> list[Ratio]:
    """engine / reference per N and metric (None: the headline), from medians of valid repeats,
    each with the noise rule's verdict (repeats paired by index: the session ran them back to
    back) and, beside it, the paired block statistics ("paired": outcome, ratio, interval, blocks)."""
    if not reference:
        return []
    rows = point_rows(rows)
    metrics = registry.headline() if metrics is None else metrics
    pp = {(p["engine"], p["n"], p["metric"]): p for p in paired_points(rows, reference, metrics, rule.min_delta_pct, rule.confidence)}
    ref = {m.n: m for m in med if m.engine == reference}
    out = []
    for m in med:
        if m.engine == reference or m.n not in ref:
            continue
        repeats = min(m.repeats, ref[m.n].repeats)
        note = validity.noise_note(repeats)
        r = {"engine": m.engine, "reference": reference, "n": m.n, "repeats": repeats, "noise": note or "known"}
        verdicts = {}
        for k in metrics:
            a, b = ref[m.n].metric(k), m.metric(k)
            r[k] = round(b / a, 4) if a and b is not None else None  # 0x is a ratio (a hit rate lost); over 0 is not
            if note is None:
                va, vb = (by_repeat(rows, e, m.n, k) for e in (reference, m.engine))
                ab = stats.unjudged(stats.compare_samples(va, vb, rule, direction(k), paired=True),
                                    cell_name(k, m.engine, m.n))
                verdicts[k] = {"verdict": ab.verdict, "reason": ab.reason, "threshold_pct": round(ab.threshold_pct, 3),
                               "delta_pct": None if ab.delta_pct is None else round(ab.delta_pct, 3)}
        r["verdicts"] = verdicts
        r["paired"] = {k: paired_entry(pp[(m.engine, m.n, k)]) for k in metrics if (m.engine, m.n, k) in pp}
        out.append(Ratio.of(r))
    return out


def numbers(rows: list[PointRow], metric: str) -> list[float]:
    """The rows' numbers under metric (a row without one left out)."""
    return [v for r in rows if (v := r.metric(metric)) is not None]


def by_repeat(rows: list[PointRow], engine: str, n, metric: str) -> dict:
    """{repeat: value} of one engine x N x metric over its valid rows that have a number."""
    mine = [r for r in rows if r.engine == engine and r.n == n and r.valid]
    return {r.repeat: r.metric(metric) for r in mine if r.metric(metric) is not None}


def paired_text(p: dict | None) -> str:
    """'0.9953x [0.9712, 1.0199] equivalent (8 blocks)' (or why there is no interval)."""
    if not p or p.get("ratio") is None:
        return f"paired: {(p or {}).get('reason') or 'not recorded'}"
    if p.get("low") is None:
        return f"{p['ratio']:.4f}x, no interval ({p.get('reason')})"
    more = f", ~{p['blocks_needed']} blocks would settle it" if p.get("blocks_needed") else ""
    return f"{p['ratio']:.4f}x [{p['low']:.4f}, {p['high']:.4f}] {p['outcome']} ({p['n_blocks']} blocks{more})"


def headline(rat: list[Ratio]) -> str:
    """One line a human reads first: the top-N decode_agg ratio of each engine with the paired
    block statistics' interval and outcome, then the users' rule's verdict."""
    parts = []
    for e in sorted({r.engine for r in rat}):
        top = max((r for r in rat if r.engine == e), key=lambda r: r.n)
        v = top.verdicts.get("decode_agg_tps")
        users = f"{v.verdict} ({v.reason})" if v else top.noise
        p = top.paired.get("decode_agg_tps")
        est = paired_text(p) if p else f"{top.metric('decode_agg_tps')}x (median ratio)"
        parts.append(f"{e}/{top.reference} decode_agg at N={top.n}: {est}; users' rule: {users}")
    return "; ".join(parts)


def users_tsv(med: list[Median], reference: str | None) -> str:
    """Their summary.tsv: one row per arm x n (medians of valid repeats), then the ratio block."""
    columns, named = registry.users_columns(), registry.users_ratios()
    arms = [[m.engine, m.n, *(m.metric(k) for k in columns)] for m in med]
    text = tables.tsv(["arm", "n", *columns], arms)
    if not reference:
        return text
    over = tables.over([m.flat() for m in med], reference, list(named))  # engine x n where both ran
    for eng in sorted({m.engine for m in med} - {reference}):
        cols = ["ratio", "n", *(f"{eng}_{short}_over_{reference}" for short in named.values())]
        mine = tables.records(over[over["engine"] == eng])
        rows = [["ratio", r["n"], *(_ratio(r.get(f"{k} over")) for k in named)] for r in mine]
        text += "\n" + tables.tsv(cols, rows)
    return text


def _ratio(v: float | None) -> str:
    return "" if v is None else f"{v:.4f}"


def parity_columns() -> list[str]:
    return ["kind", "engine", "n", "repeat", "reference", "valid", *registry.row_metrics(),
            "requests", "valid_requests", "invalid_requests", "noise"]


def parity_tsv(rows: list[PointRow], med: list[Median], rat: list[Ratio]) -> str:
    parts = (("row", [r.flat() for r in point_rows(rows)]), ("median", [m.flat() for m in med]),
             ("ratio", [r.flat() for r in rat]))
    items = [{"kind": k, **r, **({"repeat": "median"} if k == "median" else {})} for k, part in parts for r in part]
    return tables.tsv(parity_columns(), items)


PAIRED_COLUMNS = results.model.PAIRED_COLUMNS  # the result model owns the file's layout


def paired_tsv(points: list[dict], key: str = "n") -> str:
    """paired.tsv: one row per engine x point x metric (block_ratios: B/A per block, comma-joined
    in block order)."""
    cols = [key if c == "n" else c for c in PAIRED_COLUMNS]
    rows = [{**p, "block_ratios": ",".join(f"{x:.6g}" for x in p.get("ratios") or [])} for p in points]
    return tables.tsv(cols, rows)


def blocks(order: list[tuple[int, str]]) -> list[dict]:
    """[{"block": r, "order": [engines in the order they ran in repeat r]}] from plan.order."""
    out: dict[int, list[str]] = {}
    for r, e in order:
        out.setdefault(r, []).append(e)
    return [{"block": r, "order": es} for r, es in sorted(out.items())]


def head(plan) -> dict:
    """What every summary.json starts with: the sweep as planned."""
    return {
        "kind": "snapshot",
        "model": plan.model,
        "engines": plan.engines,
        "reference_engine": plan.reference,
        "shape": {k: getattr(plan.shape, k) for k in ("ptok", "gen", "parallel", "ctx", "prompt", "min_window_s", "invalid_tolerance")} | {"npl": plan.npl, "repeat": plan.repeat}
        | {"min_requests": getattr(plan.shape, "min_requests", 1)}  # rounds of N a point runs (parity.serving.rounds)
        | ({"parallel_sized": plan.sized} if plan.sized else {}),  # --parallel raised to the largest N (serving.slots)
        "order": [f"r{r}:{e}" for r, e in plan.order],
        "order_kind": getattr(plan.shape, "order", None),
        "blocks": blocks(plan.order),
    }


def write(plan, rd, rows: list[PointRow] | list[dict], extra: dict | None = None) -> dict:
    """summary.json, parity_summary.tsv, summary.tsv and paired.tsv in the run directory rd
    (plan.stats: the noise rule and the paired statistics); returns summary.json as written."""
    rows = point_rows(rows)
    med = medians(rows)
    st = plan.stats
    rule = stats.Rule.from_config(st)
    rat = ratios(rows, med, plan.reference, rule)
    pts = paired_points(rows, plan.reference, energy.paired_beside(st.metrics, rows), st.min_delta_pct, st.confidence)
    invalid = [f"{r.engine} r{r.repeat} N={r.n}: {'; '.join(r.invalid_reasons)}" for r in rows if not r.valid]
    doc = {
        **head(plan),
        "rows": rows,
        "medians": med,
        "ratios": rat,
        "headline": headline(rat),
        "invalid_points": invalid,
        "valid": not invalid,
        "rule": rule.text(),
        "paired": pts,
        "paired_rule": paired_rule(st.min_delta_pct, st.confidence),
        "metrics": definitions(),
        **(extra or {}),
    }
    doc = results.write_summary(rd, doc)  # rows, medians and ratios written flat (model.Flat.flat)
    rd.write_text("parity_summary.tsv", parity_tsv(rows, med, rat))
    rd.write_text("summary.tsv", users_tsv(med, plan.reference))
    rd.write_text("paired.tsv", paired_tsv(pts))
    return doc


def paired_rule(threshold_pct: float, confidence: float) -> dict:
    """How the paired outcomes were decided (recorded once per summary)."""

    return {"method": METHOD.replace("95 %", f"{confidence * 100:g} %"), "threshold_pct": threshold_pct, "confidence": confidence,
            "outcomes": {"improved / regressed": f"the interval excludes 1 and the estimate is beyond +-{threshold_pct:g}%",
                         "equivalent": f"the whole interval lies inside +-{threshold_pct:g}%",
                         "inconclusive": "neither; blocks_needed = blocks at which the observed spread would settle it"}}
