"""parity compare -> parity.report.compare.compare; parity gap -> parity.efficiency.gap.between_runs; parity report -> parity.report.render.report"""

from typing import List, Optional

import typer

from parity.cli.common import JsonOpt, ProfileOpt


def register(app: typer.Typer) -> None:
    @app.command("compare")
    def compare(
        run_a: str = typer.Argument(..., metavar="RUN_A", help="Control run directory (A)."),
        run_b: str = typer.Argument(..., metavar="RUN_B", help="Candidate run directory (B)."),
        metric: Optional[List[str]] = typer.Option(None, "--metric", metavar="NAME", help="Metric to compare (repeatable; default: stats.metrics)."),
        noise_floor: Optional[str] = typer.Option(None, "--noise-floor", metavar="RUN", help="A same-binary repeat run (snapshot --repeat K) whose stdev also bounds noise."),
        force: bool = typer.Option(False, "--force", help="Compare runs with red/missing gates or another hardware class (output is marked forced)."),
        fail_on_regression: bool = typer.Option(False, "--fail-on-regression", help="Exit 5 when any metric regressed beyond noise."),
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """A vs B medians per engine x N x metric, with the noise rule's verdict."""
        from parity.cli.common import make_context
        from parity.report.compare import CompareRequest, check_regressions
        from parity.report.compare import compare as run
        from parity.report.sections import fmt, pct, sessions_table, unpaired_cells

        ctx = make_context(profile, json)
        doc = run(ctx, CompareRequest(run_a=run_a, run_b=run_b, metrics=metric or None, noise_floor=noise_floor, force=force))

        def human():
            forced = [x for x in doc["force_reasons"] if x not in doc["invalid"]]
            if forced:
                ctx.out.warn("FORCED: " + "; ".join(forced))
            rows = [[r["engine"], r["n"], r["metric"], fmt(r["a_median"]), fmt(r["b_median"]), f"{r['a_repeats']}/{r['b_repeats']}", pct(r["delta_pct"]), f"{r['threshold_pct']:.2f}%", r["verdict"],
                     *unpaired_cells(r.get("unpaired"))] for r in doc["rows"]]  # fmt: skip
            ctx.out.table(f"A {doc['a_run']} vs B {doc['b_run']}", ["engine", "N", "metric", "A", "B", "repeats", "delta", "threshold", "verdict", "unpaired B/A", "unpaired"], rows)
            if doc.get("sessions"):
                ctx.out.table("each run's own paired ratio to its reference, and its change A -> B (unpaired across runs)",
                              ["engine", "N", "metric", "A paired", "B paired", "change B/A", "change"], sessions_table(doc, compact=True))  # fmt: skip
            ctx.out.info(f"{doc['unpaired_method']}: two runs are two sessions, no block holds both")
            c = doc["counts"]
            for why in doc["invalid"]:
                ctx.out.warn(f"INVALID: {why}")
            for gap in doc["missing"]:
                ctx.out.warn(f"no verdict: {gap}")
            said = ", ".join(f"{c[k]} {k}" for k in ("improved", "regressed", "within noise", "missing", "invalid"))
            ctx.out.info(f"verdict: {doc['verdict']} ({said}); rule: {doc['rule']['text']}")

        ctx.out.emit(doc, human)
        if fail_on_regression:
            check_regressions(doc["rows"])  # after the table: the user sees what regressed

    @app.command("gap")
    def gap(
        serving_run: str = typer.Argument(..., metavar="SERVING_RUN", help="A two-engine snapshot run directory."),
        bench_run: str = typer.Argument(..., metavar="BENCH_RUN", help="A bench A/B run directory of the same engines (parity bench --engines A,B)."),
        kernels: Optional[str] = typer.Option(None, "--kernels", metavar="PROFILE_RUN", help="A paired profile run of the same arms (parity profile --engines A,B): static = kernel buckets + remainder."),
        plot: Optional[str] = typer.Option(None, "--plot", metavar="PNG", help="With --kernels: the kernel link as one plot (default: PROFILE_RUN/profile/gap-kernels.png)."),
        json: bool = JsonOpt,
    ):
        """Where the gap lives: the serving ratio = static engine decode (batched-bench) x serving overhead, each with its interval."""
        from parity.cli.common import make_context
        from parity.efficiency.gap import between_runs, check_complete, lines

        ctx = make_context(None, json)
        doc = between_runs(serving_run, bench_run, kernels)
        if kernels:
            import os

            from parity.tracer.chain import plot as plot_link

            for p in doc["points"]:
                if p.get("kernels"):
                    p["kernels"]["plot"] = plot_link(p["kernels"], plot or os.path.join(kernels, "profile", f"gap-kernels-n{p['n']}.png"), f"N=B={p['n']}: static = kernel buckets + remainder")

        def human():
            for p in doc["points"]:
                ctx.out.info(f"N=B={p['n']}:")
                for line in lines(p):
                    ctx.out.info("  " + line)

        ctx.out.emit(doc, human)
        check_complete(doc)

    @app.command("report")
    def report(
        run: Optional[str] = typer.Argument(None, metavar="RUN", help="Run directory to report on (the candidate)."),
        phase: Optional[int] = typer.Option(None, "--phase", metavar="N", help="Phase number (default: next in the ledger)."),
        title: Optional[str] = typer.Option(None, "--title", help="What changed, in a few words."),
        verdict: Optional[str] = typer.Option(None, "--verdict", metavar="keep|reject|default-off", help="Author's verdict (default: from the A/B rule)."),
        compare_run: Optional[str] = typer.Option(None, "--compare", metavar="RUN_A", help="Control run: adds the A/B table (RUN is B)."),
        noise_floor: Optional[str] = typer.Option(None, "--noise-floor", metavar="RUN", help="Same-binary repeat run for the noise threshold."),
        metric: Optional[List[str]] = typer.Option(None, "--metric", metavar="NAME", help="A/B metric (repeatable; default: stats.metrics)."),
        out_dir: Optional[str] = typer.Option(None, "--out-dir", metavar="DIR", help="Where reports and the ledger go (default: reports.dir)."),
        force: bool = typer.Option(False, "--force", help="A/B against runs that are not green or on another hardware class (marked forced)."),
        no_plots: bool = typer.Option(False, "--no-plots", help="Skip the PNG plots."),
        reference: Optional[List[str]] = typer.Option(
            None, "--reference", metavar="ENGINE",
            help="Headline against this engine of the run (repeatable): the first as '% of', each further one "
                 "as 'x over', e.g. --reference vllm --reference stock."),
        rebuild_ledger: bool = typer.Option(False, "--rebuild-ledger", help="Regenerate BENCHMARK.md/.csv from the reports in --out-dir and exit."),
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """Dated phase report (markdown + plots) for a run, appended to the ledger."""
        from parity.cli.common import make_context
        from parity.report.render import ReportRequest
        from parity.report.render import report as render

        ctx = make_context(profile, json)
        req = ReportRequest(run=run, out_dir=out_dir, phase=phase, title=title, verdict=verdict, compare=compare_run, noise_floor=noise_floor,
                            metrics=metric or None, force=force, plots=not no_plots, rebuild_ledger=rebuild_ledger,
                            references=reference or None)  # fmt: skip
        doc = render(ctx, req)

        def human():
            if rebuild_ledger:
                return ctx.out.info(f"ledger rebuilt: {len(doc['rows'])} reports -> {doc['ledger']}")
            if doc["forced"]:
                ctx.out.warn("the A/B was forced: see the report's Summary")
            ctx.out.info(f"Phase{doc['phase']} {doc['verdict']}: {doc['verdict_rule']}")
            ctx.out.info(f"-> {doc['report']} ({len(doc['plots'])} plots); ledger {doc['ledger']}")

        ctx.out.emit(doc, human)
