"""The report's headline against more than one reference engine (`parity report RUN --reference
vllm --reference stock`): each engine's median beside "% of vllm" (the first reference: the
target) and "x over stock" (each further one: a baseline), as the users' README tables put their
final_benchmark.csv.  The join is parity.tables.against over the run's medians (valid repeats)."""

from __future__ import annotations

from parity import tables
from parity.errors import UsageError
from parity.report.rundata import RunData
from parity.report.sections import fmt

METRICS = ["decode_agg_tps", "prefill_tps"]  # the columns of the users' final_benchmark.csv


def check_references(rd: RunData, references: list[str] | None) -> None:
    """Every --reference names an engine of the run, once (a UsageError before any file is written)."""
    if not references:
        return
    twice = sorted({r for r in references if references.count(r) > 1})
    if twice:
        raise UsageError(f"--reference {twice[0]}: given twice")
    med = (rd.summary or {}).get("medians") or []
    if not med:
        raise UsageError(f"--reference: {rd.path} has no medians to set against a reference "
                         "(no summary.json or no valid repeat)")
    engines = list(dict.fromkeys(m.get("engine") for m in med))
    for r in references:
        if r not in engines:
            raise UsageError(f"--reference {r}: not an engine of {rd.path} "
                             f"(its engines: {', '.join(map(str, engines))})")


def reference_section(rd: RunData, references: list[str] | None) -> dict | None:
    """{"cols", "rows" (formatted cells), "data" (the numbers: engine, n, metric, value, over)};
    None without --reference."""
    if not references:
        return None
    med = [m for m in (rd.summary or {}).get("medians") or [] if "engine" in m and "n" in m]
    data = tables.against(med, references, METRICS)
    cols = ["engine", "N", "metric", "median", f"% of {references[0]}", *(f"x over {r}" for r in references[1:])]
    rows = [[d["engine"], d["n"], d["metric"], fmt(d["value"]),
             *(cell(d["over"][r], r == references[0]) for r in references)]
            for d in data]
    return {"references": references, "cols": cols, "rows": rows, "data": data}


def cell(ratio: float | None, percent: bool) -> str:
    if ratio is None:
        return "-"
    return f"{ratio * 100:.1f}%" if percent else f"{ratio:.2f}x"
