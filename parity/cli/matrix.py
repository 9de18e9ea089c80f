"""parity matrix run -> parity.matrix.run.run_request"""

from typing import Optional

import typer

from parity.cli.common import JsonOpt, ProfileOpt


def register(app: typer.Typer) -> None:
    mx = typer.Typer(help="Run one campaign on several hosts (SSH or Slurm) and profiles; one cross-hardware report.", no_args_is_help=True)
    app.add_typer(mx, name="matrix")

    @mx.command("run")
    def run(
        file: str = typer.Argument(..., metavar="FILE", help="Matrix YAML: campaign, profile, targets [{host, profile}]."),
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """Run the matrix's campaign on every target (hosts in parallel) and write cross_hardware.md/.json."""
        from parity.cli import state
        from parity.cli.common import make_context
        from parity.errors import ParityError, UsageError
        from parity.matrix.run import MatrixRequest, run_request

        if state.host:
            raise UsageError("parity matrix run: the hosts are the matrix file's targets; drop --host")
        opened = []

        def open_context(name):
            opened.append(make_context(name, json))
            return opened[0]

        try:
            doc = run_request(MatrixRequest(file=file, profile=profile), open_context)
        except ParityError as e:
            if json and getattr(e, "summary", None):
                opened[0].out.emit(e.summary)
            raise
        out = opened[0].out
        out.emit(doc, lambda: out.info(f"matrix {doc['matrix']}: complete on {', '.join(t['target'] for t in doc['targets'])} -> {doc['run_dir']}/cross_hardware.md"))
