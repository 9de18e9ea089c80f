"""The op timing's human tables and lines (plain data in: the CLI and a report render them)."""

from __future__ import annotations

from parity.optime.stats import HEADLINE


def _f(v, nd=2) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def _ratio(c: dict | None) -> str:
    if not c or c.get("ratio") is None:
        return "-"
    return f"{c['ratio']:.4f}" + (f" [{c['low']:.4f}, {c['high']:.4f}]" if c.get("low") is not None else " (1 block)")


def _rate(v: dict | None, metric: str) -> str:
    if not v:
        return "-"
    m = v["median"]
    return f"{m / 1e9:.2f} GFLOPS" if metric == "flops" else f"{m:.2f} GB/s"


def params(case: str, op: str) -> str:
    """A case's shape line without the op's name around it (the table is the op's)."""
    return case[len(op) + 1 : -1] if case.startswith(op + "(") and case.endswith(")") else case


def op_lines(doc: dict) -> list[str]:
    """One line per arm x op: the op's B/A of time and rate, the outcome, the users' keep rule."""
    out = []
    for o in doc.get("per_op") or []:
        rate = o.get("flops") or o.get("gbps")
        what = "FLOPS" if o.get("flops") else "GB/s"
        counts = ", ".join(f"{v} {k}" for k, v in (o.get("cases") or {}).items())
        t = o.get("time") or {}
        out.append(
            f"{o['op']} {o['engine']}/{t.get('reference') or doc.get('reference')}: time per run B/A {_ratio(t)}"
            f" over {o['n_cases']} case(s) ({t.get('outcome') or '-'}; cases: {counts or 'none paired'})"
            + (f", {what} B/A {_ratio(rate)}" if rate else "")
            + f"; users' rule: {o['users_rule']['verdict']} ({o['users_rule']['why']})"
        )
    return out


def case_lines(doc: dict, op: str) -> list[str]:
    """The per-case table as lines (a shape line is too wide for a terminal's columns): the case,
    each arm's median time per run (CV %) and rate, then per other arm B/A of time with its
    interval, the outcome and the users' rule, and B/A of the rate."""
    ref = doc.get("reference")
    ordered = ([ref] if ref else []) + [a for a in doc["engines"] if a != ref]
    med = {(a["engine"], a["case"]): a for a in doc["per_arm"] if a["op"] == op}
    cell = {(c["engine"], c["case"], c["metric"]): c for c in doc["cases"]}
    out = []
    for case in dict.fromkeys(a["case"] for a in doc["per_arm"] if a["op"] == op):
        arms = []
        for a in ordered:
            m = med.get((a, case))
            t = (m or {}).get(HEADLINE)
            rate = _rate(m.get("flops"), "flops") if m and "flops" in m else _rate((m or {}).get("gbps"), "gbps")
            arms.append(
                f"{a} "
                + (
                    "-"
                    if not m
                    else (
                        "not supported"
                        if not m["supported"]
                        else f"{_f(t['median'])} us/run (CV {_f(t['cv_pct'])} %), {rate}"
                    )
                )
            )
        out += [f"  {params(case, op)}", "    " + "; ".join(arms)]
        for a in ordered[1:] if ref else []:
            t = cell.get((a, case, HEADLINE))
            r = cell.get((a, case, "flops")) or cell.get((a, case, "gbps"))
            outcome = (t or {}).get("outcome") or "-"
            users = ((t or {}).get("users_rule") or {}).get("verdict") or "-"
            rate = "FLOPS" if r and r["metric"] == "flops" else "GB/s"
            out.append(f"    {a}/{ref}: time {_ratio(t)} {outcome}, users' rule {users}; {rate} {_ratio(r)}")
    return out
