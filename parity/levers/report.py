"""The dated phase report of one lever A/B (parity/report's templates and ledger): the verdict,
key number and interval, both arms' gates, the per-point paired table with per-block ratios.
It goes to <run dir>/reports/ with its ledger row there (the lever map is the memory across runs)."""

from __future__ import annotations

from pathlib import Path

from parity.artifacts import slugify
from parity.bench.table import table
from parity.files import atomic_write_text
from parity.levers.map import today
from parity.report import ledger
from parity.report.render import template_env
from parity.report.runtime_sections import traces_rows


def _f(v, nd=4) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def write_report(run_dir: Path, doc: dict, measured: dict, serving: bool) -> str:
    """reports/<dated phase>.md in run_dir and its ledger row; returns its name relative to run_dir."""
    out_dir = run_dir / "reports"
    out_dir.mkdir(parents=True, exist_ok=True)
    phase, date = ledger.next_phase(out_dir), today()
    gate_rows, kl_rows = [], []
    for ph in doc["gates"]["phases"]:
        for p in ph["md5"]:
            a, b = (p["arms"][doc["arms"][k]] for k in ("A", "B"))
            gate_rows.append([p["phase"], p["model"], p["path"] or "-", a["md5"] or "-", b["md5"] or "-", p["status"], p["detail"] if p["status"] != "equal" else ""])
        if k := ph.get("kl"):
            kld = k.get("kld") or {}
            kl_rows.append([k["phase"], k["model"], k["path"] or "-", _f(kld.get(doc["arms"]["A"]), 6), _f(kld.get(doc["arms"]["B"]), 6), k["status"], k["detail"]])
    point_rows = [[c["point"], _f(c["ratio"]), f"[{_f(c['low'])}, {_f(c['high'])}]", c.get("n_blocks"), c.get("outcome"), ", ".join(_f(r) for r in c.get("ratios") or []),
                   (c.get("reason") or "") + holm_note(c.get("family"))] for c in doc["measurement"]["points"]]  # fmt: skip
    bench_tables = []
    if not serving and measured.get("paired") is not None:
        for metric in ("s_tg", "s_pp"):
            cols, rows = table(measured, metric)
            bench_tables.append({"metric": metric.upper(), "cols": cols, "rows": rows})
    st = doc["measurement"].get("stop") or {}
    stop = f"{st.get('rule')}: {st.get('why')}" if st else "-"
    title = f"lever {doc['lever']}"
    text = template_env().get_template("lever.md.j2").render(doc=doc, phase=phase, date=date, title=title, gate_rows=gate_rows, kl_rows=kl_rows, point_rows=point_rows,
                                                       bench_tables=bench_tables, stop=stop, engagement_rows=engagement_rows(doc),
                                                       runtime=None, traces=traces_rows(doc.get("traces") or []))  # fmt: skip
    name = f"{date}-phase{phase:03d}-{slugify(title)[:50]}.md"
    atomic_write_text(out_dir / name, text)
    ledger.append(out_dir, {"date": date, "phase": phase, "title": title, "verdict": doc["verdict"], "key_ratios": doc["key"]["text"], "report": name, "artifact": doc["run_dir"]})
    return f"reports/{name}"


def engagement_rows(doc: dict) -> list[list]:
    """The evidence table: the build's env strings, arm B's files against A's, the log lines only
    B printed and each --marker's count per arm."""
    eng = doc.get("engagement") or {}
    ev = eng.get("evidence") or {}
    rows = []
    for part in (ev.get("build") or {}).get("parts") or []:
        strings = part.get("strings") or {}
        for name, files in (strings.get("found") or {}).items():
            where = ", ".join(f"{f.rsplit('/', 1)[-1]} x{c}" for f, c in sorted(files.items()))
            where = where or f"in none of {strings.get('searched')} files"
            readers = ", ".join((part.get("series") or {}).get(name) or []) or "-"
            rows.append([f"env string {name} (read by patch: {readers})", "same build", where])
        if part.get("how") == "build":
            rows.append(["build files that differ", "-", ", ".join(part.get("differ") or []) or "none: byte-identical"])
    logs = ev.get("logs")
    if logs:
        rows.append(["log lines read", logs["lines"]["A"], logs["lines"]["B"]])
        for m, c in logs["markers"].items():
            rows.append([f"marker `{m}`", c["A"], c["B"]])
        for x in logs["only_in_B"]:
            rows.append([f"only in B: `{x['line'][:100]}`", 0, x["count"]])
    return rows


def holm_note(fam: dict | None) -> str:
    """The cell's place in the verdict's family: its Holm level and the interval at that level."""
    if not fam:
        return ""
    changed = f"; per cell {fam['unadjusted']}, in the family {fam['outcome']}" if fam["unadjusted"] != fam["outcome"] else ""
    iv = f" [{_f(fam['low'])}, {_f(fam['high'])}]" if fam.get("low") is not None else ""
    p = "-" if fam.get("p") is None else f"{fam['p']:.3g}"
    return f"; p {p}, Holm level {fam['level']:.4g}{iv}{changed}"
