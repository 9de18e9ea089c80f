"""parity campaign run -> parity.campaign.run_request"""

from typing import List, Optional

import typer

from parity.cli.common import JsonOpt, ProfileOpt


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
        from parity.campaign import CampaignRequest, parse_vars, run_request
        from parity.cli import command_argv, state
        from parity.cli.common import make_context
        from parity.errors import ParityError

        req = CampaignRequest(file=file, only=only, resume=resume, dry_run=dry_run, vars=parse_vars(var or []), profile=profile, host=state.host, argv=command_argv())
        opened = []

        def open_context(name):
            opened.append(make_context(name, json))  # with --host this runs the command remotely and exits
            return opened[0]

        try:
            doc = run_request(req, open_context)
        except ParityError as e:
            if json and getattr(e, "campaign_summary", None):
                opened[0].out.emit(e.campaign_summary)  # CI reads the summary; the error line follows on stderr
            raise
        out = opened[0].out
        out.emit(doc, lambda: render_plan(out, doc) if dry_run else render_summary(out, doc))
        if dry_run and "go_no_go" in doc:
            from parity.gonogo import raise_if_no_go

            raise_if_no_go(doc["go_no_go"], doc["run_dir"])


def render_plan(out, doc: dict) -> None:
    hosts = doc["hosts"]
    where = f" on {', '.join(hosts)}{' (parallel)' if doc['parallel_hosts'] else ''}" if hosts else ""
    out.info(f"campaign {doc['campaign']} (profile {doc['profile']}){where}: {len(doc['steps'])} steps")
    for i, s in enumerate(doc["steps"], 1):
        flags = (" [always-run]" if s["always_run"] else "") + (" [continue]" if s["on_failure"] == "continue" else "")
        flags += " [skip: complete]" if s["skip"] else ""
        out.info(f"  {i}. {s['name']} ({s['kind']}){flags} {s['with'] or ''}")
    if "go_no_go" in doc:
        from parity.cli.common import render_go

        render_go(out, doc)


def render_summary(out, doc: dict) -> None:
    if "steps" not in doc:  # a fan-out over the campaign's hosts
        return out.info(f"campaign {doc['campaign']}: complete on {', '.join(h['host'] for h in doc['hosts'])} -> {doc['run_dir']}")
    out.info(f"campaign {doc['campaign']}: complete -> {doc['run_dir']}")
