"""parity report / parity compare"""

from __future__ import annotations

from typing import List, Optional

import typer

from parity.commands.common import JsonOpt, ProfileOpt


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
        from parity.report.cli_impl import compare as impl

        raise typer.Exit(impl(run_a, run_b, metric, noise_floor, force, fail_on_regression, profile, json))

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
        rebuild_ledger: bool = typer.Option(False, "--rebuild-ledger", help="Regenerate BENCHMARK.md/.csv from the reports in --out-dir and exit."),
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """Dated phase report (markdown + plots) for a run, appended to the ledger."""
        from parity.report.cli_impl import report as impl

        raise typer.Exit(impl(run, phase, title, verdict, compare_run, noise_floor, metric, out_dir, force, no_plots, rebuild_ledger, profile, json))
