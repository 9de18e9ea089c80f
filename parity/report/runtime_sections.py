"""The report's runtime sections, rendered from what the run recorded (nothing computed here):
the runtime banner against the build and each engine's kernel path (summary.json "banner",
"kernel_paths", parity.serving.logs), and the trace envs read back (summary.json or bench.json
"traces", parity.traces)."""

from __future__ import annotations

from parity.report.rundata import RunData
from parity.report.sections import fmt

FIELDS_SHOWN = 12  # fields of one trace shown per arm (summary.json holds them all)
VALUES_SHOWN = 5  # values of one field's histogram shown


def runtime_section(rd: RunData) -> dict | None:
    s = rd.summary or {}
    b = s.get("banner") if isinstance(s.get("banner"), dict) else None
    kp = [k for k in s.get("kernel_paths") or [] if isinstance(k, dict)]
    if b is None and not kp:
        return None
    b = b or {}
    rows = [
        [r.get("engine"), r.get("repeat"), r.get("status"), *(r.get(k) or "-" for k in ("expected", "got", "why"))]
        for r in b.get("rows") or []
    ]
    kernel = [
        [
            k.get("engine"),
            k.get("repeat"),
            k.get("path"),
            k.get("moe_backend") or "-",
            k.get("linear_backend") or "-",
            "yes" if k.get("marlin_warning") else "no",
            k.get("why") or "-",
        ]
        for k in kp
    ]
    lines = list(dict.fromkeys(f"{k.get('engine')}: {ln}" for k in kp for ln in k.get("lines") or []))
    return {"status": b.get("status"), "why": b.get("why") or "", "rows": rows, "kernel": kernel, "lines": lines}


def _values(h: dict) -> str:
    shown = ", ".join(f"{v} x{c}" for v, c in (h.get("values") or [])[:VALUES_SHOWN])
    more = h.get("distinct", 0) - min(VALUES_SHOWN, len(h.get("values") or []))
    return shown + (f", +{more} more" if more > 0 else "")


def _range(h: dict) -> str:
    return f"{fmt(h['min'])} / {fmt(h['median'])} / {fmt(h['max'])}" if "min" in h else "-"


def _hists(last: dict) -> str:
    hists = [(k, v) for k, v in last.items() if isinstance(v, dict)]
    return "; ".join(f"{k} " + ", ".join(f"{b}:{n}" for b, n in v.items()) for k, v in hists)


def traces_section(rd: RunData) -> dict | None:
    return traces_rows([*((rd.summary or {}).get("traces") or []), *((rd.bench or {}).get("traces") or [])])


def traces_rows(found: list[dict]) -> dict | None:
    """The tables of recorded "traces" entries: a serving arm's (engine, repeat) or a bench block's
    (arm, block); None when there is none."""
    if not found:
        return None
    envs, fields, once, reuse = [], [], [], []
    for t in found:
        serving = "engine" in t
        who = f"{t['engine']} r{t['repeat']}" if serving else f"{t['arm']} block {t['block']}"
        for tr in t.get("traces") or []:
            tags = ", ".join(f"{k} x{v}" for k, v in (tr.get("tags") or {}).items()) or "-"
            envs.append(
                [
                    who,
                    f"{tr['env']}={tr.get('value')}",
                    tr.get("lines"),
                    tags,
                    "yes" if tr.get("verified") else "no",
                    tr.get("note") or tr.get("source") or "-",
                ]
            )
            for name, h in list((tr.get("fields") or {}).items())[:FIELDS_SHOWN]:
                fields.append([who, tr["env"], name, h.get("n"), _values(h), _range(h)])
            if tr.get("once") and tr.get("last"):
                scalars = " ".join(f"{k}={v}" for k, v in tr["last"].items() if not isinstance(v, dict))
                once.append([who, tr["env"], scalars, _hists(tr["last"]) or "-"])
        g = t.get("graph_reuse")
        if g:
            scope = f"N={','.join(map(str, t.get('points') or []))}" if serving else "the block's points"
            reuse.append([who, f"{g['reused']}/{g['steps']}", fmt(g.get("pct")), scope])
        elif t.get("series_counters"):
            reuse.append([who, "-", "-", "[L5INSTR] without graph_reuse (a series before 0040)"])
    return {"envs": envs, "fields": fields, "once": once, "reuse": reuse}
