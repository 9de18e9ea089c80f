"""The bench A/B (parity.bench.ab) in a report: per point each arm's S_TG / S_PP
median and CV, B/A [low, high] with the paired outcome and the users' rule, and the stop
rule.  Kept apart from sections.py: rendering only, from bench.json."""

from __future__ import annotations
from parity.bench.table import table


def bench_ab_section(rd) -> dict | None:
    """None unless bench.json holds blocks (an A/B, an A/A or one engine's repeats)."""
    b = getattr(rd, "bench", None)
    if not b or "paired" not in b or not b.get("per_engine"):
        return None

    tables = []
    for metric in ("s_tg", "s_pp"):
        cols, rows = table(b, metric)
        tables.append({"metric": metric.upper(), "cols": cols, "rows": rows})
    stop = b.get("stop") or {}
    arms = ", ".join(f"{a['name']} ({a['engine']})" if a["name"] != a["engine"] else a["name"] for a in b.get("arms") or [])
    return {
        "arms": arms, "reference": b.get("reference"), "aa": b.get("aa"), "blocks": b.get("blocks"), "tables": tables,
        "order": "; ".join(" ".join(o) for o in b.get("order") or []), "order_rule": b.get("order_rule"),
        "stop": f"{stop.get('rule')}: {stop.get('why')} (budget: {stop.get('budget')})", "threshold_pct": b.get("threshold_pct"),
        "shape": f"npp {b.get('npp')}, ntg {b.get('ntg')}, npl {b.get('npl')}, model {b.get('model')}",
    }  # fmt: skip
