"""`parity history changes`: change points over every series of the store (hardware class x
engine pair x workload x point x metric), each with the runs, pins and series digests on both
sides, the size of the step with its 95 % interval, and the bisection that would name its
culprit (run with --bisect).

A series point is one run's paired ratio engine/reference (its blocks cancel the box's drift),
or with kind=median one engine's median.  Which runs are points: one rule for every run kind
(parity.history.store: dated, complete or failed only on a verdict, not invalid, gates passed;
a value that is positive and finite).
The detector (parity.history.changepoint) calls nothing in a series shorter than min_points;
a change is confirmed once min_after points stand after it (one odd night is not a change),
pending before that.  The step: ratio of the geometric means after/before, between the
neighbouring change points, with a Welch t interval on the logs (parity.stats.unpaired)."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

from parity.errors import UsageError
from parity.history import alert, changepoint, store
from parity.metrics.registry import direction
from parity.stats.unpaired import welch

METHOD = ("E-Divisive means with a Student t test per split (Apache Otava's method: windows of {window} points sliding by half, weak points at "
          "10 x p, merged down to p <= {p:g}); step = after/before ratio of geometric means, 95 % Welch t interval on the logs")  # fmt: skip
KINDS = ("paired", "median", "all")
KNOWN_WITHIN = 2  # a recorded change this many points from a new one is the same change, re-estimated


@dataclass
class ChangesRequest:
    """What `parity history changes` asks for."""

    store: str | None = None
    match: str | None = None  # a substring of the series id
    metrics: list[str] | None = None
    kind: str = "paired"
    max_pvalue: float = changepoint.MAX_PVALUE
    window: int = changepoint.WINDOW
    min_points: int = changepoint.MIN_POINTS
    min_after: int = 3
    bisect: bool = False  # run the first bisect command of every confirmed change not bisected yet
    record: bool = False  # remember confirmed changes (the nightly's step): `new` then means first seen now
    current: str | None = None  # a run key counted even while its run is still running (the nightly's own)


def check(req: ChangesRequest) -> None:
    if req.kind not in KINDS:
        raise UsageError(f"--kind must be one of {', '.join(KINDS)}, got {req.kind!r}")
    if not (0 < req.max_pvalue < 1):
        raise UsageError(f"--max-pvalue must lie in (0, 1), got {req.max_pvalue}")
    if req.min_points < 4 or req.window < 4:
        raise UsageError(f"--min-points and --window must be >= 4 (got {req.min_points}, {req.window})")
    if req.min_after < 1:
        raise UsageError(f"--min-after must be >= 1, got {req.min_after}")


# the rule of parity.history.store (RUN_COUNTS, POINT_OK), read from the tables (a store written
# by an older parity keeps its older series view until its next write)
SERIES_SQL = f"""
SELECT series_id, hardware_class, engine, reference, workload, point, n, metric, kind, value, low, high, blocks, run_at,
       run_key, run_id, path, pin, series_digest
FROM ({store.SERIES_SELECT})
WHERE {store.POINT_OK} AND run_at IS NOT NULL AND (run_counts OR run_key = ?)
ORDER BY series_id, run_at, run_id
"""


LEFT_OUT_SQL = f"""
SELECT r.run_key, r.run_id, r.kind, r.run_at, r.status, r.counts, r.valid, r.gate_status FROM runs r
WHERE NOT coalesce({store.RUN_COUNTS}, false) AND r.run_key <> ? ORDER BY r.run_at NULLS FIRST, r.run_id
"""


def why_out(r: dict) -> str:
    """Why a run is no point of any series (the first part of store.RUN_COUNTS it fails)."""
    if r["run_at"] is None:
        return "no date (a copy without its manifest)"
    if not r["counts"]:
        return f"status {r['status'] or 'unknown'}"
    if r["gate_status"] != "pass":
        return "ungated" if r["gate_status"] == "ungated" else f"gates {r['gate_status'] or 'unknown'}"
    return "marked invalid"


def left_out(con, current: str | None) -> list[dict]:
    """The runs of the store that are no point of any series, each with why."""
    cols, rows = store.query_args(con, LEFT_OUT_SQL, [current or ""])
    runs = [dict(zip(cols, r)) for r in rows]
    return [{"run_id": d["run_id"], "kind": d["kind"], "run_at": store.plain(d["run_at"]), "why": why_out(d)}
            for d in runs]


def load_series(con, req: ChangesRequest) -> dict[str, list[dict]]:
    cols, rows = store.query_args(con, SERIES_SQL, [req.current or ""])
    out: dict[str, list[dict]] = {}
    for r in rows:
        p = dict(zip(cols, r))
        if req.kind != "all" and p["kind"] != req.kind:
            continue
        if req.match and req.match not in p["series_id"]:
            continue
        if req.metrics and p["metric"] not in req.metrics:
            continue
        out.setdefault(p["series_id"], []).append(p)
    return out


def builds_of(con, run_key: str) -> dict:
    cols, rows = store.query_args(con, "SELECT * FROM builds WHERE run_key = ?", [run_key])
    return {r[cols.index("engine")]: dict(zip(cols, r)) for r in rows}


def run_of(con, run_key: str) -> dict:
    cols, rows = store.query_args(con, "SELECT * FROM runs WHERE run_key = ?", [run_key])
    return dict(zip(cols, rows[0])) if rows else {}


def step_of(before: list[float], after: list[float], better: str) -> dict:
    w = welch(before, after, better)
    pct = lambda v: None if v is None else round((v - 1) * 100, 4)  # noqa: E731
    return {"ratio": w["ratio"], "low": w["low"], "high": w["high"], "step_pct": pct(w["ratio"]), "low_pct": pct(w["low"]), "high_pct": pct(w["high"]), "df": w["df"], "method": w["method"]}


def side(points: list[dict]) -> dict:
    return {"runs": len(points), "first": points[0]["run_id"], "last": points[-1]["run_id"], "from": store.plain(points[0]["run_at"]), "to": store.plain(points[-1]["run_at"]),
            "pins": sorted({str(p["pin"]) for p in points if p["pin"]}), "series_digests": sorted({str(p["series_digest"])[:12] for p in points if p["series_digest"]})}  # fmt: skip


def analyse(con, sid: str, pts: list[dict], req: ChangesRequest) -> tuple[dict, list[dict]]:
    first = pts[0]
    info = {"series_id": sid, "points": len(pts), "kind": first["kind"], "engine": first["engine"], "reference": first["reference"] or None, "workload": first["workload"],
            "point": first["point"], "n": first["n"], "metric": first["metric"], "hardware_class": first["hardware_class"], "last_run": pts[-1]["run_id"], "status": "analysed"}  # fmt: skip
    if len(pts) < req.min_points:
        info["status"] = f"too short: {len(pts)} points, needs {req.min_points}"
        return info, []
    values = [p["value"] for p in pts]
    found = changepoint.detect(values, req.window, req.max_pvalue, 0.0, req.min_points)
    cuts = [0, *[s.index for s in found], len(pts)]
    try:
        better = direction(first["metric"])
    except Exception:  # a metric the registry does not know (a bench time): higher is better unless a time
        better = "lower" if first["metric"].startswith("t") else "higher"
    out = []
    for k, s in enumerate(found):
        before, after = pts[cuts[k]:s.index], pts[s.index:cuts[k + 2]]
        step = step_of([p["value"] for p in before], [p["value"] for p in after], "higher")
        gain = step["step_pct"] if better == "higher" else (None if step["step_pct"] is None else -step["step_pct"])
        b_run, a_run = before[-1], after[0]
        change = {"series_id": sid, "series": {k2: info[k2] for k2 in ("engine", "reference", "workload", "point", "n", "metric", "hardware_class", "kind")},
                  "index": s.index, "night": s.index + 1, "pvalue": s.pvalue, "qhat": s.qhat, "status": "confirmed" if len(after) >= req.min_after else f"pending: {len(after)} of {req.min_after} points after it",
                  "direction": "worse" if gain is not None and gain < 0 else "better", "better": better, **step,
                  "before": side(before), "after": side(after), "last_before": {"run_id": b_run["run_id"], "run_key": b_run["run_key"], "path": b_run["path"]},
                  "first_after": {"run_id": a_run["run_id"], "run_key": a_run["run_key"], "path": a_run["path"]}}  # fmt: skip
        change["bisect"] = alert.plan(change, builds_of(con, b_run["run_key"]), builds_of(con, a_run["run_key"]), run_of(con, a_run["run_key"]))
        out.append(change)
    info["changes"] = len(out)
    return info, out


def known(con, change: dict, pts: list[dict]) -> dict | None:
    near = {p["run_key"] for p in pts[max(0, change["index"] - KNOWN_WITHIN): change["index"] + KNOWN_WITHIN + 1]}
    cols, rows = store.query_args(con, "SELECT * FROM change_points WHERE series_id = ?", [change["series_id"]])
    return next((dict(zip(cols, r)) for r in rows if r[cols.index("run_key")] in near), None)


def remember(con, change: dict, by: str | None) -> None:
    b = change["bisect"]
    con.execute("INSERT INTO change_points (series_id, run_key, before_run_key, confirmed_by, step_pct, low_pct, high_pct, pvalue, over, command) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [change["series_id"], change["first_after"]["run_key"], change["last_before"]["run_key"], by, change["step_pct"], change["low_pct"], change["high_pct"], change["pvalue"], b["over"], b["command"]])  # fmt: skip


def analyse_all(con, req: ChangesRequest) -> tuple[dict[str, list[dict]], list[dict], list[dict]]:
    """(points per series, series infos, changes) of the store; each change says whether it is
    new (never recorded), and with record/bisect the new confirmed ones are recorded."""
    series = load_series(con, req)
    infos, found = [], []
    for sid, pts in series.items():
        info, ch = analyse(con, sid, pts, req)
        infos.append(info)
        for c in ch:
            prior = known(con, c, pts) if c["status"] == "confirmed" else None
            c["new"] = c["status"] == "confirmed" and prior is None
            c["recorded"] = {k: store.plain(v) for k, v in prior.items()} if prior else None
            if c["new"] and (req.record or req.bisect):
                remember(con, c, req.current)
        found += ch
    return series, infos, found


def changes(ctx, req: ChangesRequest) -> dict:
    """Every series' change points; with record, remember the confirmed ones (new = first seen now);
    with bisect, run the first bisect command of each confirmed change not bisected yet and
    remember its result."""
    check(req)
    path = store.resolve(req.store, ctx.artifacts_root)
    if path is None:
        raise UsageError(f"the history store is off ({store.ENV}=off): give --store FILE")
    with store.connect(path, write=req.bisect or req.record, create=False) as con:  # only reads unless it records
        _, infos, found = analyse_all(con, req)
        out = left_out(con, req.current)
    doc = {"store": str(path), "method": METHOD.format(window=req.window, p=req.max_pvalue), "max_pvalue": req.max_pvalue, "window": req.window, "min_points": req.min_points,
           "min_after": req.min_after, "kind": req.kind, "series": infos, "changes": found, "bisections": [],
           "left_out": out}  # fmt: skip
    if req.bisect:  # every confirmed change not bisected yet: new now, or recorded by a nightly that printed it
        for c in found:
            if c["status"] == "confirmed" and c["bisect"]["commands"] and (c["recorded"] or {}).get("bisect_exit") is None:
                doc["bisections"].append(run_bisection(path, c, ctx.artifacts_root, ctx.runner, ctx.out))
    return doc


def run_bisection(path, change: dict, artifacts_root, runner, out) -> dict:
    """The change's first bisect command, run as printed (a parity process of its own, --json)."""
    argv = [sys.executable, "-m", "parity", "--artifacts", str(artifacts_root), *change["bisect"]["commands"][0][1:], "--json"]
    out.info(f"[history] bisecting {change['series_id']} (night {change['night']}): {change['bisect']['command']}")
    # the bisection's own run lands in this store too; a GPU lock this process holds is inherited (PARITY_GPU_LOCK)
    res = runner.run(argv, env={store.ENV: str(path)}, on_line=lambda stream, line: out.info(f"  {line}") if stream == "stderr" and line.startswith("[bisect]") else None)
    try:
        doc = json.loads(res.stdout)
    except ValueError:
        doc = {}
    result = {"series_id": change["series_id"], "command": change["bisect"]["command"], "exit_code": res.rc, "run_dir": doc.get("run_dir"), "culprit": doc.get("culprit"),
           "reason": doc.get("reason") or (res.tail(3) if res.rc else None)}  # fmt: skip
    key = (change.get("recorded") or {}).get("run_key") or change["first_after"]["run_key"]
    with store.connect(path, create=False) as con:
        con.execute("UPDATE change_points SET bisect_run = ?, bisect_exit = ?, culprit = ?, bisected_at = current_timestamp WHERE series_id = ? AND run_key = ?",
                    [result["run_dir"], res.rc, result["culprit"], change["series_id"], key])  # fmt: skip
    return result
