"""The bench A/B's human table (per point: each arm's median and CV, B/A with its interval, the
outcome): plain data in, no measurement code, so the report and the CLI render it cheaply."""

from __future__ import annotations

HEADLINE = "s_tg"  # what --until-ci watches, at every point


def _f(v, nd=2) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def table(doc: dict, metric: str = HEADLINE) -> tuple[list[str], list[list]]:
    """(columns, rows) of the human table: per point, each arm's median (CV %) of the metric,
    then B/A [low, high] and the outcome (with the users' rule beside)."""
    arms = doc["engines"]
    ref = doc.get("reference")
    others = [a for a in arms if a != ref]
    ordered = ([ref] if ref else []) + others
    name = metric.upper()
    cols = ["PP", "TG", "B", *[f"{name} {a}" for a in ordered], *[f"CV % {a}" for a in ordered]]
    if ref:
        for a in others:
            cols += [f"{a}/{ref} [low, high]", "outcome", "users' rule"]
    med = {(a["engine"], a["pp"], a["tg"], a["b"]): a[metric] for a in doc["per_engine"]}
    par = {(p["engine"], p["pp"], p["tg"], p["b"]): p for p in doc["paired"] if p["metric"] == metric}
    rows = []
    for pt in sorted({(a["pp"], a["tg"], a["b"]) for a in doc["per_engine"]}):
        row = [*pt, *[_f((med.get((a, *pt)) or {}).get("median")) for a in ordered], *[_f((med.get((a, *pt)) or {}).get("cv_pct")) for a in ordered]]
        for a in others if ref else []:
            p = par.get((a, *pt))
            if not p or p.get("ratio") is None:
                row += ["-", "-", "-"]
                continue
            row += [f"{p['ratio']:.4f} [{_f(p['low'], 4)}, {_f(p['high'], 4)}]", p["outcome"] + (f" (~{p['blocks_needed']} blocks)" if p.get("blocks_needed") else " (> 1000 blocks)" if p["outcome"] == "inconclusive" and p.get("n_blocks", 0) >= 2 else ""), p["users_rule"]["verdict"]]
        rows.append(row)
    return cols, rows
