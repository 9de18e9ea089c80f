"""The report's workload section as plain data, read from a run's summary.json (a
`parity snapshot --workload` run); templates/_workloads.md.j2 lays it out.  Rendering
only: every number comes from the run, every definition from the metric declarations
(or, without them, from the definitions the run recorded)."""

from __future__ import annotations

from pathlib import Path

from parity.metrics.registry import all_metrics
from parity.report import workload_plots
from parity.report.sections import fmt
from parity.metrics.workload import HEADLINE

# per kind: the plots (title, file, function name, what it reads); the table's columns are
# the run's own `shown` (workload_summary.SHOWN, what the CLI printed)
PLOTS = {
    "shared-prefix": [("prefix-cache hit rate per engine", "workload_prefix_hits.png", "prefix_hits", "medians")],
    "prefill-under-decode": [("decode stall distribution", "workload_stalls.png", "stall_distribution", "rows")],
    "open-loop": [("latency vs request rate", "workload_rate_latency.png", "rate_latency", "both"),
                  ("goodput vs request rate", "workload_goodput.png", "goodput_vs_rate", "both")],  # fmt: skip
    "multi-turn": [("TTFT by turn", "workload_ttft_by_turn.png", "ttft_by_turn", "medians")],
}
WHAT = {
    "shared-prefix": "groups of requests sharing a long prefix (one primer per group first), all measured requests in flight at once; the server's own /metrics give the prefix-cache hits",
    "prefill-under-decode": "decode streams running while long prompts arrive; the stall is the decode gaps overlapping each long prompt's admission (its send to its first token)",
    "open-loop": "arrivals at each requested rate (seeded gamma gaps), sent whatever is in flight; a late load generator voids a point, a server that cannot keep up is 'not held'",
    "multi-turn": "conversations in lockstep; each turn resends the whole history (earlier prompts and responses) plus a new user chunk",
}


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


def _long_prompts(summary: dict) -> list[list]:
    out = []
    for r in summary.get("rows") or []:
        for p in r.get("long") or []:
            out.append([r["engine"], r.get("repeat"), p.get("index"), fmt(p.get("ttft_ms")), p.get("streams_running", "-"), fmt(p.get("stall_max_ms")), fmt(p.get("stall_p99_ms")), p.get("why") or ""])
    return out


def _ratios(summary: dict, kind: str) -> tuple[list[str], list[list]]:
    cols = HEADLINE[kind]
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
    if not isinstance(w, dict) or w.get("kind") not in PLOTS:
        return None
    kind = w["kind"]
    head, rows = _point_table(s)
    rhead, rrows = _ratios(s, kind)
    params = {k: w.get(k) for k in {
        "shared-prefix": ("groups", "group_size", "prefix_tokens", "suffix_tokens", "prime", "gen"),
        "prefill-under-decode": ("decode_streams", "decode_gen", "long_prompts", "long_ptok", "long_every_s", "ptok", "gen"),
        "open-loop": ("rates", "requests_per_rate", "burstiness", "seed", "exact_rate", "max_delay_p99_ms", "min_achieved_share", "slo", "ptok", "gen"),
        "multi-turn": ("conversations", "turns", "turn_tokens", "gen"),
    }[kind]}  # fmt: skip
    notes = calibration_notes(s.get("calibration"))
    notes += [f"NOT HELD: {p}" for p in s.get("not_held") or []] + [f"INVALID: {p}" for p in s.get("invalid_points") or []]
    notes += [f"COARSE STREAM: {p}" for p in s.get("coarse_streams") or []]
    figs, plot_note = [], None
    if plots and asset_dir is not None:
        for title, name, fn, reads in PLOTS[kind]:
            draw, where = getattr(workload_plots, fn), Path(asset_dir) / name
            if reads == "both":
                path = draw(s.get("medians") or [], where, s.get("rows") or [])
            else:
                path = draw(s.get(reads) or [], where)
            if path is not None:
                figs.append({"title": title, "file": f"{rel}/{name}" if rel else name, "path": str(path)})
    return {
        "name": w.get("name"),
        "kind": kind,
        "what": WHAT[kind],
        "description": w.get("description") or "",
        "params": [[k, "-" if v is None else str(v)] for k, v in params.items()],
        "head": head,
        "rows": rows,
        "ratio_head": rhead,
        "ratio_rows": rrows,
        "long_prompts": _long_prompts(s) if kind == "prefill-under-decode" else [],
        "headline": s.get("headline") or "",
        "notes": notes,
        "plots": figs,
        "plot_note": plot_note,
        "definitions": _definitions(s.get("shown") or [], s),
    }
