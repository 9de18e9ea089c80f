"""The paired statistics of a focused op timing (pure: rows in, plain data out).

Per arm (other than the reference A) x case (each op's shape line) x metric (us_per_run, lower
is better; FLOPS and GB/s, higher is better, where the tool reports them): B/A over the blocks
with its interval and three-way outcome (parity.stats.paired; the case's time cells held to Holm
over the family of every case, parity.stats.family), and the users' rule beside
(parity.stats.compare_samples on the same paired blocks).  Per op: B/A of the geometric mean
over the cases both arms timed in a block (= the geometric mean of the per-case ratios), the
same statistics, and the users' keep rule over its cases: KEEP when a case improved beyond
max(min_delta_pct, noise_k x same-binary stdev) and none regressed, else KILL (their Phases
113-138: a flat or mixed row set is a reject).  Closed-world: a case one arm timed and the other
did not, a block without a case's time, a run without numbers, each is a named problem."""

from __future__ import annotations

import math

from parity import tables
from parity.stats import Rule, compare_samples, describe
from parity.stats.family import adjust
from parity.stats.paired import overall, paired

METRICS = {"us_per_run": "lower", "flops": "higher", "gbps": "higher"}
HEADLINE = "us_per_run"
KEEP, KILL = "KEEP", "KILL"
USERS = ("verdict", "delta_pct", "threshold_pct", "stdev_pct", "consistent", "reason")


def ok(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def cases_in_order(rows: list[dict]) -> list[tuple[str, str]]:
    """(op, case) in the order the tool printed them."""
    return list(dict.fromkeys((r["op"], r["case"]) for r in rows))


def table(rows: list[dict]) -> dict:
    """{(arm, case, metric): {block: value}} of the timed rows (a missing number stays out)."""
    out: dict = {}
    for r in rows:
        if r["supported"]:
            for m in METRICS:
                if r.get(m) is not None:
                    out.setdefault((r["engine"], r["case"], m), {})[r["repeat"]] = r[m]
    return out


def half_widths(rows: list[dict], reference: str | None, threshold_pct: float, confidence: float) -> dict:
    """{'<arm> <case> us_per_run': stop half-width %} for the stop rule (parity.stats.adaptive)."""
    if not reference:
        return {}
    out, t = {}, table(rows)
    for eng in sorted({r["engine"] for r in rows} - {reference}):
        for _, case in cases_in_order(rows):
            a, b = t.get((reference, case, HEADLINE)), t.get((eng, case, HEADLINE))
            if a and b:
                out[f"{eng} {case} {HEADLINE}"] = paired(a, b, "lower", threshold_pct, confidence).stop_half_width_pct
    return out


def _users(a: dict, b: dict, rule: Rule, better: str) -> dict:
    u = compare_samples(a, b, rule, better, paired=True)
    return {k: getattr(u, k) for k in USERS}


def case_cells(rows: list[dict], reference: str, threshold_pct: float, confidence: float, rule: Rule) -> list[dict]:
    """Per arm x case x metric timed in both arms: the paired B/A and the users' rule; the time
    cells of each arm adjusted as one Holm family."""
    out, t = [], table(rows)
    for eng in sorted({r["engine"] for r in rows} - {reference}):
        mine = []
        for op, case in cases_in_order(rows):
            for m, better in METRICS.items():
                a, b = t.get((reference, case, m)), t.get((eng, case, m))
                if not a or not b:
                    continue
                p = paired(a, b, better, threshold_pct, confidence).to_dict()
                mine.append(
                    {
                        "engine": eng,
                        "reference": reference,
                        "op": op,
                        "case": case,
                        "metric": m,
                        **p,
                        "users_rule": _users(a, b, rule, better),
                    }
                )
        times = adjust([c for c in mine if c["metric"] == HEADLINE], 1 - confidence)
        held = {c["case"]: c for c in times}
        out += [held[c["case"]] if c["metric"] == HEADLINE else c for c in mine]
    return out


def op_cells(rows: list[dict], reference: str, threshold_pct: float, confidence: float, rule: Rule) -> list[dict]:
    """Per arm x op x metric: B/A of the per-block geometric mean over the cases both arms timed
    in that block, with its paired statistics and the users' rule."""
    out, t = [], table(rows)
    for eng in sorted({r["engine"] for r in rows} - {reference}):
        for op in dict.fromkeys(r["op"] for r in rows):
            cases = [c for o, c in cases_in_order(rows) if o == op]
            for m, better in METRICS.items():
                a, b, used = {}, {}, set()
                for block in sorted({r["repeat"] for r in rows}):
                    pairs = {
                        c: (t.get((reference, c, m), {}).get(block), t.get((eng, c, m), {}).get(block)) for c in cases
                    }
                    both = [(x, y) for x, y in pairs.values() if ok(x) and ok(y)]
                    used |= {c for c, (x, y) in pairs.items() if ok(x) and ok(y)}
                    if both:
                        a[block] = math.exp(sum(math.log(x) for x, _ in both) / len(both))
                        b[block] = math.exp(sum(math.log(y) for _, y in both) / len(both))
                if a:
                    p = paired(a, b, better, threshold_pct, confidence).to_dict()
                    out.append(
                        {
                            "engine": eng,
                            "reference": reference,
                            "op": op,
                            "metric": m,
                            "n_cases": len(used),
                            **p,
                            "users_rule": _users(a, b, rule, better),
                        }
                    )
    return out


def per_arm(rows: list[dict]) -> list[dict]:
    """Per arm x case: blocks timed, and per metric its median, CV % and values."""
    out = []
    for eng in dict.fromkeys(r["engine"] for r in rows):
        for op, case in cases_in_order(rows):
            mine = [r for r in rows if r["engine"] == eng and r["case"] == case]
            if not mine:
                continue
            d = {
                "engine": eng,
                "op": op,
                "case": case,
                "supported": any(r["supported"] for r in mine),
                "blocks": sum(1 for r in mine if r["supported"]),
            }
            for m in METRICS:
                vals = [r[m] for r in mine if r["supported"] and r.get(m) is not None]
                if vals:
                    s = describe(vals)
                    d[m] = {
                        "median": s.median,
                        "cv_pct": None if s.cv_pct is None else round(s.cv_pct, 3),
                        "values": vals,
                    }
            out.append(d)
    return out


def coverage(rows: list[dict], arms: list[str], blocks: int, reference: str | None) -> list[str]:
    """Named holes: a case timed in one arm and not the other, a block without a case's time."""
    out = []
    every = set(range(blocks))
    for op, case in cases_in_order(rows):
        timed = {
            e: {r["repeat"] for r in rows if r["engine"] == e and r["case"] == case and r["supported"]} for e in arms
        }
        seen = {e: any(r["engine"] == e and r["case"] == case for r in rows) for e in arms}
        have = [e for e in arms if timed[e]]
        if not have:
            continue  # not supported anywhere: said per arm, no number expected
        for e in arms:
            if not timed[e]:
                why = "not supported there" if seen[e] else "absent from its output"
                out.append(f"{case}: timed in {', '.join(have)} but not in {e} ({why})")
            elif timed[e] != every:
                out.append(f"{case}: no time in block(s) {', '.join(str(b) for b in sorted(every - timed[e]))} of {e}")
    return out


def op_summary(cases: list[dict], ops_cells: list[dict], ops: list[str]) -> list[dict]:
    """Per arm x op: the op's B/A of time (and FLOPS / GB/s), the outcomes of its cases and the
    users' keep rule over them."""
    out = []
    for eng in dict.fromkeys(c["engine"] for c in ops_cells):
        for op in ops:
            mine = [c for c in cases if c["engine"] == eng and c["op"] == op and c["metric"] == HEADLINE]
            cells = {c["metric"]: c for c in ops_cells if c["engine"] == eng and c["op"] == op}
            users = [c["users_rule"]["verdict"] for c in mine]
            counts = {k: users.count(k) for k in ("improved", "regressed", "within noise")}
            outcomes = [c["outcome"] for c in mine]
            keep = KEEP if counts["improved"] and not counts["regressed"] else KILL
            why = (
                f"{counts['improved']} case(s) improved, none regressed"
                if keep == KEEP
                else (
                    f"{counts['regressed']} case(s) regressed"
                    if counts["regressed"]
                    else "no case improved beyond the rule"
                )
            )
            out.append(
                {
                    "engine": eng,
                    "op": op,
                    "n_cases": len(mine),
                    "time": cells.get(HEADLINE),
                    "flops": cells.get("flops"),
                    "gbps": cells.get("gbps"),
                    "outcome": overall(outcomes) if outcomes else None,
                    "cases": {k: outcomes.count(k) for k in dict.fromkeys(outcomes)},
                    "users_rule": {"verdict": keep, "why": why, **counts},
                }
            )
    return out


def analyze(
    rows: list[dict],
    run_problems: list[dict],
    arms: list[str],
    ops: list[str],
    blocks: int,
    reference: str | None,
    threshold_pct: float,
    confidence: float,
    rule: Rule,
) -> dict:
    """Everything ops.json holds beyond the plan: rows, per arm, per case, per op, problems."""
    cases = case_cells(rows, reference, threshold_pct, confidence, rule) if reference else []
    ops_ = op_cells(rows, reference, threshold_pct, confidence, rule) if reference else []
    holes = coverage(rows, arms, blocks, reference)
    problems = [
        f"{p['op']} on {p['arm']}, block {p['block']}: {p['problem']} ({p['log']})" for p in run_problems
    ] + holes
    return {
        "rows": rows,
        "per_arm": per_arm(rows),
        "cases": cases,
        "per_op": op_summary(cases, ops_, ops) if reference else [],
        "problems": problems,
        "valid": not problems,
        "metrics": METRICS,
        "headline": HEADLINE,
        "threshold_pct": threshold_pct,
        "confidence": confidence,
        "rule": rule.text(),
        "not_supported": sorted(
            {r["case"] for r in rows if not r["supported"]} - {r["case"] for r in rows if r["supported"]}
        ),
    }


def lever_cells(doc: dict) -> list[dict]:
    """A lever's verdict cells: each case's time B/A (point = the case), before the family (the
    lever adjusts its own)."""
    out = []
    for c in doc.get("cases") or []:
        if c["metric"] == HEADLINE:
            fam = c.get("family") or {}
            out.append(
                {
                    **{k: v for k, v in c.items() if k != "family"},
                    "outcome": fam.get("unadjusted", c.get("outcome")),
                    "point": c["case"],
                }
            )
    return out


def expected_points(doc: dict) -> list[str]:
    """Every case either arm timed, and every named problem: each needs a B/A or stops the verdict."""
    timed = list(dict.fromkeys(r["case"] for r in doc.get("rows") or [] if r.get("supported")))
    return timed + list(doc.get("problems") or [])


TSV_COLS = [
    "kind",
    "engine",
    "reference",
    "op",
    "case",
    "repeat",
    "slot",
    "metric",
    "value",
    "median",
    "cv_pct",
    "ratio",
    "low",
    "high",
    "n_blocks",
    "outcome",
    "users_verdict",
]


def tsv(doc: dict) -> str:
    """One table: kind=row (a block's value), arm (median, CV), case and op (B/A, interval, outcome,
    the users' rule)."""
    out = []
    for r in doc["rows"]:
        for m in METRICS:
            if r.get(m) is not None:
                out.append(dict(kind="row", engine=r["engine"], op=r["op"], case=r["case"], repeat=r["repeat"],
                                slot=r["slot"], metric=m, value=r[m]))
    for a in doc["per_arm"]:
        for m in METRICS:
            if m in a:
                out.append(dict(kind="arm", engine=a["engine"], op=a["op"], case=a["case"], metric=m,
                                median=a[m]["median"], cv_pct=a[m]["cv_pct"], n_blocks=a["blocks"]))
    for c in doc["cases"]:
        out.append(dict(_verdict_cells(c, c["users_rule"]), kind="case", case=c["case"], metric=c["metric"]))
    for o in doc["per_op"]:
        for m in METRICS:
            c = o.get("time" if m == HEADLINE else m)
            if c:
                rule = o["users_rule"] if m == HEADLINE else c["users_rule"]
                out.append(dict(_verdict_cells(c, rule), kind="op", engine=o["engine"], op=o["op"], metric=m))
    return tables.tsv(TSV_COLS, out)


def _verdict_cells(c: dict, rule: dict) -> dict:
    """The cells a case line and an op line share: the B/A, its interval and outcome, the users' verdict."""
    cells = {k: c[k] for k in ("engine", "reference", "op", "ratio", "low", "high", "n_blocks", "outcome")}
    return dict(cells, users_verdict=rule["verdict"])
