"""parity campaign run"""

from __future__ import annotations

from typing import List, Optional

import typer

from parity.commands.common import JsonOpt, ProfileOpt


def register(app: typer.Typer) -> None:
    camp = typer.Typer(help="Run YAML campaigns (build, gates, sweeps, profiles, reports).", no_args_is_help=True)
    app.add_typer(camp, name="campaign")

    @camp.command("run")
    def run(
        file: str = typer.Argument(..., metavar="FILE", help="Campaign YAML, e.g. campaigns/smoke.yaml"),
        only: Optional[List[str]] = typer.Option(None, "--only", metavar="STEP", help="Run only these steps (repeatable)."),
        resume: Optional[str] = typer.Option(None, "--resume", metavar="RUN_DIR", help="Continue a run dir: skip its complete steps."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Print the resolved plan and exit."),
        var: Optional[List[str]] = typer.Option(None, "--var", metavar="K=V", help="Set a campaign variable."),
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """Run a campaign's steps in order in one run directory."""
        from parity.campaign_cli import run_command

        raise typer.Exit(run_command(file, only, resume, dry_run, var or [], profile, json))
