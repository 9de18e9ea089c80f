"""parity config show"""

from __future__ import annotations

from typing import Optional

import typer

from parity.commands.common import JsonOpt, ProfileOpt


def register(app: typer.Typer) -> None:
    config_app = typer.Typer(help="Show the resolved configuration.", no_args_is_help=True)
    app.add_typer(config_app, name="config")

    @config_app.command("show")
    def show(profile: Optional[str] = ProfileOpt, json: bool = JsonOpt):
        """Print the resolved profile (embedded defaults + your file)."""
        import dataclasses

        from parity.commands.common import make_context

        ctx = make_context(profile, json)  # with --host: shows the profile as the remote resolves it
        prof, out = ctx.profile, ctx.out
        data = dataclasses.asdict(prof)

        def human():
            import yaml

            out.console.print(f"# profile {prof.name} (from {prof.source_file})", markup=False)
            out.console.print(yaml.safe_dump(data, sort_keys=False, width=120), markup=False)

        out.emit(data, human)

    @config_app.command("list")
    def list_profiles(json: bool = JsonOpt):
        """List the embedded profiles."""
        from parity.config import available_profiles
        from parity.ui import Output

        names = available_profiles()
        Output(json).emit(names, lambda: print("\n".join(names)))
