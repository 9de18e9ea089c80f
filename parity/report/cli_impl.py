"""Logic behind `parity compare` and `parity report`: call one function, render."""

from __future__ import annotations


def compare(run_a, run_b, metrics, noise_floor, force, fail_on_regression, profile, json_mode) -> int:
    from parity.commands.common import make_context
    from parity.report.compare import check_regressions, run_compare
    from parity.report.sections import fmt, pct

    ctx = make_context(profile, json_mode)
    doc = run_compare(ctx.profile, run_a, run_b, metrics, force, noise_floor)

    def human():
        if doc["forced"]:
            ctx.out.warn("FORCED: " + "; ".join(doc["force_reasons"]))
        rows = [[r["engine"], r["n"], r["metric"], fmt(r["a_median"]), fmt(r["b_median"]), f"{r['a_repeats']}/{r['b_repeats']}", pct(r["delta_pct"]), f"{r['threshold_pct']:.2f}%", r["verdict"]] for r in doc["rows"]]
        ctx.out.table(f"A {doc['a_run']} vs B {doc['b_run']}", ["engine", "N", "metric", "A", "B", "repeats", "delta", "threshold", "verdict"], rows)
        c = doc["counts"]
        ctx.out.info(f"verdict: {doc['verdict']} ({c['improved']} improved, {c['regressed']} regressed, {c['within noise']} within noise); rule: {doc['rule']['text']}")

    ctx.out.emit(doc, human)
    if fail_on_regression:
        check_regressions(doc["rows"])
    return 0


def report(run, phase, title, verdict, compare_run, noise_floor, metrics, out_dir, force, no_plots, rebuild_ledger, profile, json_mode) -> int:
    from pathlib import Path

    from parity.commands.common import make_context
    from parity.errors import UsageError

    ctx = make_context(profile, json_mode)
    out = out_dir or ctx.profile.reports.dir
    if rebuild_ledger:
        from parity.report.ledger import rebuild

        if not Path(out).is_dir():
            raise UsageError(f"--out-dir {out}: no such directory")
        rows = rebuild(Path(out))
        ctx.out.emit({"ledger": str(Path(out) / "BENCHMARK.md"), "rows": rows}, lambda: ctx.out.info(f"ledger rebuilt: {len(rows)} reports -> {Path(out) / 'BENCHMARK.md'}"))
        return 0
    if not run:
        raise UsageError("parity report needs a RUN directory (or --rebuild-ledger)")
    from parity.report.render import ReportRequest, render_report

    req = ReportRequest(run=run, out_dir=out, phase=phase, title=title, verdict=verdict, compare=compare_run, noise_floor=noise_floor, metrics=metrics or None, force=force, plots=not no_plots)
    doc = render_report(ctx.profile, req)

    def human():
        if doc["forced"]:
            ctx.out.warn("the A/B was forced: see the report's Summary")
        ctx.out.info(f"Phase{doc['phase']} {doc['verdict']}: {doc['verdict_rule']}")
        ctx.out.info(f"-> {doc['report']} ({len(doc['plots'])} plots); ledger {doc['ledger']}")

    ctx.out.emit(doc, human)
    return 0
