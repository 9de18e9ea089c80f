"""A vs B: per engine x N x metric, medians, delta, noise threshold and verdict.
A is the control, B the candidate.  Runs whose gates are not green or whose rows are marked
invalid, or that ran on another hardware class, are refused unless forced (the output says so;
a forced A/B of runs whose numbers do not count is invalid, never a verdict).

Two runs are two sessions: no block holds both, so the paired block statistics do not
apply to A vs B.  Beside the users' rule each row carries an UNPAIRED interval
(parity.stats.unpaired: ratio of geometric means, Welch t on the log values), labelled so.
When both runs hold the same engines and reference, "sessions" adds each run's own paired
estimate (engine/reference, per block, drift-cancelled within its session) and how much
that ratio moved from A to B (Welch on the two runs' log block ratios: unpaired across runs)."""

from __future__ import annotations

from dataclasses import dataclass

from msgspec.structs import asdict

from parity import stats
from parity.errors import UsageError
from parity.metrics.registry import direction as metric_direction
from parity.report.rundata import RunData, cells, gate_problems, load_run, values_by_cell
from parity.stats import family
from parity.stats.unpaired import METHOD, ratio_change, welch
from parity.errors import RegressionDetected
from parity.report.sections import paired_points, pct


MISSING = stats.MISSING  # a cell without a usable value in A or B: a named failure, never within noise
INVALID = "invalid"  # a cell read from rows marked invalid; every cell of an A/B forced past numbers that do not count
NO_VERDICT = (INVALID, MISSING)


def no_verdict(metric: str, engine: str, n: int, a: dict | None, b: dict | None) -> tuple[str, str] | None:
    """(invalid | missing, why) when engine x N has no verdict on metric ("B has no decode_agg_tps
    for paged at N=8 (r1: null)"), else None.  An invalid row on either side makes it invalid."""
    out, invalid = [], False
    for label, c in (("A", a), ("B", b)):
        if c is None:
            out.append(f"{label} has no row for {engine} at N={n}")
            continue
        said = c["invalid"] + c["gaps"]
        invalid = invalid or bool(c["invalid"])
        if said:
            more = ", ..." if len(said) > 3 else ""
            out.append(f"{label} has no {metric} for {engine} at N={n} ({', '.join(said[:3])}{more})")
    return ((INVALID if invalid else MISSING), "; ".join(out)) if out else None


def unjudged(r: stats.ABResult, metric: str, engine: str, n: int) -> stats.ABResult:
    """A cell the rule could not judge is missing, never within noise (parity.stats.unjudged)."""
    return stats.unjudged(r, f"{metric} {engine} at N={n}")


def verdict(rows: list[dict]) -> str:
    """One word over the rows: numbers that do not count win, then a regression, then a missing
    value (never within noise)."""
    vs = [r["verdict"] for r in rows]
    for word in (INVALID, stats.REGRESSED, MISSING):
        if word in vs:
            return word
    return stats.overall(vs)


def invalid_reasons(a: RunData, b: RunData, floor: RunData | None = None, *, current: RunData | None = None
                    ) -> list[str]:
    """Why the numbers of A, B or the noise-floor run do not count (their gates, status, invalid rows)."""
    runs = [("A", a), ("B", b)] + ([("noise floor", floor)] if floor is not None else [])
    return [f"{label} {rd.run_id}: {p}" for label, rd in runs for p in gate_problems(rd, current=rd is current)]


def refusal_reasons(a: RunData, b: RunData, *, current: RunData | None = None, floor: RunData | None = None
                    ) -> list[str]:
    reasons = invalid_reasons(a, b, floor, current=current)
    ha, hb = a.hardware_class, b.hardware_class
    if ha is None or hb is None:
        missing = [lbl for lbl, h in (("A", ha), ("B", hb)) if h is None]
        reasons.append(f"no hardware.json hardware_class in {' and '.join(missing)} (cannot check the class)")
    elif ha != hb:
        reasons.append(f"hardware_class differs: A {ha}, B {hb}")
    return reasons


def _floor_cell(floor: RunData | None, metric: str, engine: str, n: int):
    if floor is None:
        return None
    cells = values_by_cell(floor, metric)
    if (engine, n) in cells:
        return list(cells[(engine, n)].values())
    same_n = [k for k in cells if k[1] == n]
    if len({k[0] for k in same_n}) == 1:  # a one-binary floor run applies to every engine
        return list(cells[same_n[0]].values())
    return None


def compare_runs(a: RunData, b: RunData, metrics: list[str], rule: stats.Rule, *, force: bool = False, floor: RunData | None = None, current: RunData | None = None, defaults: bool = False) -> dict:
    reasons = refusal_reasons(a, b, current=current, floor=floor)
    if reasons and not force:
        raise UsageError("refusing to compare: " + "; ".join(reasons) + " (--force compares anyway and marks the output)")
    invalid = invalid_reasons(a, b, floor, current=current)  # forced past: shown, never a verdict
    known = {k for r in a.rows() + b.rows() for k, v in r.items() if isinstance(v, (int, float)) and k not in ("n", "repeat")}
    skipped = []
    if defaults:  # the profile's set: older runs may lack a metric parity added since
        skipped = [m for m in metrics if m not in known]
        metrics = [m for m in metrics if m in known]
        if not metrics:
            raise UsageError(f"none of the default metrics ({', '.join(skipped)}) is in the runs' summary rows (known: {', '.join(sorted(known))}); name one with --metric")
    unknown = [m for m in metrics if m not in known]
    if unknown:
        raise UsageError(f"--metric {unknown[0]}: not in the runs' summary rows (known: {', '.join(sorted(known))})")
    rows, unmatched = [], set()
    for metric in metrics:
        better = metric_direction(metric)
        ca, cb = cells(a, metric), cells(b, metric)
        unmatched |= set(ca) ^ set(cb)
        if not set(ca) & set(cb):
            continue
        for engine, n in sorted(set(ca) | set(cb), key=lambda k: (k[0], k[1])):
            gap = no_verdict(metric, engine, n, ca.get((engine, n)), cb.get((engine, n)))
            if gap:
                r = stats.ABResult(None, None, 0, 0, None, None, None, "none", rule.min_delta_pct, None, None, *gap,
                                   better)
                up = {"ratio": None, "p": None, "outcome": gap[0], "reason": gap[1]}
                rows.append({"engine": engine, "n": n, "metric": metric, **r.to_dict(), "unpaired": up})
                continue
            va, vb = ca[(engine, n)]["values"], cb[(engine, n)]["values"]
            r = unjudged(stats.compare_samples(va, vb, rule, better, _floor_cell(floor, metric, engine, n)), metric, engine, n)
            up = welch(va, vb, better, rule.min_delta_pct, rule.confidence)
            rows.append({"engine": engine, "n": n, "metric": metric, **r.to_dict(), "unpaired": up})
    if invalid:
        rows = [_invalidated(r, invalid) for r in rows]
    if not rows:
        raise UsageError(f"nothing to compare: runs {a.run_id} and {b.run_id} share no engine x N cell")
    # the comparison's verdict reads every engine x N x metric: its unpaired claims are held to the family (Holm)
    for r, u in zip(rows, family.adjust_tests([r["unpaired"] for r in rows], 1 - rule.confidence)):
        r["unpaired"] = u
    sess = sessions(a, b, metrics, rule)
    for r, c in zip(sess, family.adjust_tests([r["change"] for r in sess], 1 - rule.confidence)):
        r["change"] = c
    counts = {v: sum(1 for r in rows if r["verdict"] == v) for v in stats.VERDICTS + NO_VERDICT}
    gaps = [r["reason"] for r in rows if r["verdict"] == MISSING]
    return {
        "a": str(a.path),
        "b": str(b.path),
        "a_run": a.run_id,
        "b_run": b.run_id,
        "hardware_class": {"a": a.hardware_class, "b": b.hardware_class},
        "noise_floor_run": str(floor.path) if floor else None,
        "forced": bool(reasons),
        "force_reasons": reasons,
        "rule": {**asdict(rule), "text": rule.text()},
        "metrics": metrics,
        "rows": rows,
        "unmatched": [f"{e} N={n}" for e, n in sorted(unmatched)],
        "skipped_metrics": skipped,
        "counts": counts,
        "missing": gaps,
        "invalid": invalid or [r["reason"] for r in rows if r["verdict"] == INVALID],
        "verdict": verdict(rows),
        "unpaired_method": METHOD.replace("95 %", f"{rule.confidence * 100:g} %"),
        "sessions": sess,
        "family": {"method": family.METHOD, "unpaired": family.family_line([r["unpaired"] for r in rows], "unpaired B/A of every engine x N x metric"),
                   "sessions": family.family_line([r["change"] for r in sess], "change of every paired ratio from A to B")},
    }


def sessions(a: RunData, b: RunData, metrics: list[str], rule: stats.Rule) -> list[dict]:
    """Both runs hold the same engines and reference: per engine x N x metric each run's own
    paired estimate (engine/reference over its blocks) and the change of that ratio from A to
    B (unpaired across the runs).  [] otherwise."""

    sa, sb = a.summary or {}, b.summary or {}
    ref = sa.get("reference_engine")
    if not ref or ref != sb.get("reference_engine") or set(sa.get("engines") or []) != set(sb.get("engines") or []):
        return []
    pa = {(p["engine"], p["n"], p["metric"]): p for p in paired_points(a, metrics, rule.min_delta_pct, rule.confidence)[0]}
    pb = {(p["engine"], p["n"], p["metric"]): p for p in paired_points(b, metrics, rule.min_delta_pct, rule.confidence)[0]}
    out = []
    for key in sorted(set(pa) & set(pb), key=lambda k: (k[0], k[1], metrics.index(k[2]) if k[2] in metrics else 99)):
        x, y = pa[key], pb[key]
        out.append({"engine": key[0], "reference": ref, "n": key[1], "metric": key[2],
                    "a": {k: x.get(k) for k in ("ratio", "low", "high", "n_blocks", "outcome")}, "b": {k: y.get(k) for k in ("ratio", "low", "high", "n_blocks", "outcome")},
                    "change": ratio_change(x.get("ratios") or [], y.get("ratios") or [], metric_direction(key[2]), rule.min_delta_pct, rule.confidence)})  # fmt: skip
    return out


def _invalidated(row: dict, why: list[str]) -> dict:
    """A row of an A/B forced past runs whose numbers do not count: its numbers stay to read, its
    verdict is invalid (rule_verdict: what the rule would have said on them)."""
    reason = "forced past numbers that do not count: " + "; ".join(why)
    return {**row, "verdict": INVALID, "rule_verdict": row["verdict"], "reason": reason}


def check_regressions(rows: list[dict], against: str = "") -> None:
    """Raise RegressionDetected (exit 5) naming every row whose verdict is regressed, invalid or missing."""
    bad = [f"{r['engine']} N={r['n']} {r['metric']} {pct(r['delta_pct'])}" for r in rows if r["verdict"] == "regressed"]
    invalid = list(dict.fromkeys(r["reason"] for r in rows if r["verdict"] == INVALID))
    gaps = [r["reason"] for r in rows if r["verdict"] == MISSING]
    said = [f"regressed beyond noise{against}: {', '.join(bad)}"] if bad else []
    if invalid:
        said.append(f"invalid{against if not said else ''}: {'; '.join(invalid)}")
    if gaps:
        where = against if not said else ""
        said.append(f"no verdict{where} (a missing number is never within noise): {'; '.join(gaps)}")
    if said:
        raise RegressionDetected("; ".join(said))


def run_compare(profile, run_a: str, run_b: str, metrics: list[str] | None, force: bool, noise_floor: str | None) -> dict:
    a, b = load_run(run_a), load_run(run_b)
    floor = load_run(noise_floor) if noise_floor else None
    return compare_runs(a, b, metrics or list(profile.stats.metrics), stats.Rule.from_config(profile.stats), force=force, floor=floor, defaults=not metrics)


@dataclass
class CompareRequest:
    """What `parity compare` asks for: A (control) and B (candidate) run directories."""

    run_a: str
    run_b: str
    metrics: list[str] | None = None  # None: stats.metrics
    noise_floor: str | None = None
    force: bool = False


def compare(ctx, req: CompareRequest) -> dict:
    """`parity compare`: medians per engine x N x metric with the noise rule's verdict."""
    return run_compare(ctx.profile, req.run_a, req.run_b, req.metrics, req.force, req.noise_floor)
