"""The report's workload section as plain data, read from a run's summary.json (a
`parity snapshot --workload` run); templates/_workloads.md.j2 lays it out.  Rendering
only: every number comes from the run, every definition from the metric declarations
(or, without them, from the definitions the run recorded), and what a kind shows (its
description, parameters, headline, plots and tables) from its object in parity.workloads."""

from __future__ import annotations

from pathlib import Path

from parity.metrics.registry import all_metrics
from parity.report.sections import fmt
from parity.workloads import WORKLOADS


def _definitions(names: list[str], summary: dict) -> list[list]:
    """The run's own recorded definitions, else the registry's (as parity.report.sections.definitions)."""
    table = {n: (m.unit, m.better, m.formula) for n, m in all_metrics().items()}
    table.update({m["name"]: (m.get("unit"), m.get("better"), m.get("formula")) for m in summary.get("metrics") or [] if isinstance(m, dict) and "name" in m})
    return [[n, *table[n]] for n in names if n in table]


def _point_table(summary: dict) -> tuple[list[str], list[list]]:
    med = summary.get("medians") or []
    cols = [c for c in summary.get("shown") or [] if any(c in m for m in med)]
    has_held = any("held" in m for m in med)
    rows = []
    for m in med:
        reps = f"{m.get('repeats')}" + (f" (+{m['invalid_repeats']} invalid)" if m.get("invalid_repeats") else "")
        held = [{True: "held", False: "NOT HELD"}.get(m.get("held"), "-")] if has_held else []
        rows.append([m.get("engine"), m.get("point") or m.get("n"), reps, *held, *(fmt(m.get(c)) for c in cols)])
    return ["engine", "point", "repeats", *(["rate held"] if has_held else []), *cols], rows


def _ratios(summary: dict, kind: str) -> tuple[list[str], list[list]]:
    cols = WORKLOADS[kind].headline
    rows = []
    for r in summary.get("ratios") or []:
        cells = []
        for k in cols:
            v = (r.get("verdicts") or {}).get(k)
            cells.append(fmt(r.get(k)) + (f" ({v['verdict']})" if v else ""))
        rows.append([r["engine"], r.get("reference"), r.get("point") or r.get("n"), *cells, r.get("noise")])
    return ["engine", "reference", "point", *cols, "noise"], rows


def calibration_notes(cal) -> list[str]:
    """What the trial block chose for a built-in's field (parity.workloads.calibration)."""
    if not isinstance(cal, dict) or not cal.get("knob"):
        return []
    knob, trial, chosen = cal["knob"], cal.get("trial_gen"), cal.get("gen")
    if chosen == trial:
        out = [f"calibration: {knob} {chosen} kept: block 0's windows were long enough, and it counts"]
    else:
        trial_blocks = len({a.get("repeat") for a in cal.get("trial_arms") or []}) or 1
        out = [f"CALIBRATED: {knob} {trial} -> {chosen} so every window lasts min_window_s {cal.get('min_window_s')} s at {cal.get('margin')} x its trial pace "
               f"(shortest: {cal.get('shortest')}); {trial_blocks} trial block not counted, the parameters above are the measured blocks'"]  # fmt: skip
    if cal.get("capped"):
        out.append(f"CAPPED: {cal.get('shortest')} needed {knob} {cal.get('need')}, kept at {chosen} by {cal.get('cap_by')}")
    return out


def workload_section(rd, asset_dir: Path | None = None, rel: str = "", plots: bool = True) -> dict | None:
    """None unless the run is a workload run; else its description, tables, notes and plots."""
    s = rd.summary or {}
    w = s.get("workload")
    if not isinstance(w, dict) or w.get("kind") not in WORKLOADS:
        return None
    kind = w["kind"]
    wk = WORKLOADS[kind]
    head, rows = _point_table(s)
    rhead, rrows = _ratios(s, kind)
    params = {p: w.get(p) for p in wk.params}
    notes = calibration_notes(s.get("calibration"))
    notes += [f"NOT HELD: {p}" for p in s.get("not_held") or []] + [f"INVALID: {p}" for p in s.get("invalid_points") or []]
    notes += [f"COARSE STREAM: {p}" for p in s.get("coarse_streams") or []]
    figs, plot_note = [], None
    if plots and asset_dir is not None:
        for plot in wk.plots:  # each kind draws its own (parity.workloads.<kind>)
            where = Path(asset_dir) / plot.file
            if plot.reads == "both":
                path = plot.draw(s.get("medians") or [], where, rd.rows())
            elif plot.reads == "rows":
                path = plot.draw(rd.rows(), where)
            else:
                path = plot.draw(s.get(plot.reads) or [], where)
            if path is not None:
                figs.append({"title": plot.title, "file": f"{rel}/{plot.file}" if rel else plot.file, "path": str(path)})
    return {
        "name": w.get("name"),
        "kind": kind,
        "what": wk.what,
        "description": w.get("description") or "",
        "params": [[k, "-" if v is None else str(v)] for k, v in params.items()],
        "head": head,
        "rows": rows,
        "ratio_head": rhead,
        "ratio_rows": rrows,
        "tables": [t for t in wk.tables(s, fmt) if t["rows"]],
        "headline": s.get("headline") or "",
        "notes": notes,
        "plots": figs,
        "plot_note": plot_note,
        "definitions": _definitions(s.get("shown") or [], s),
    }
