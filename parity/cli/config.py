"""parity config show|which|list|schema -> parity.config.as_dict / choose_profile / available_profiles / json_schema"""

from typing import Optional

import typer

from parity.cli.common import JsonOpt, ProfileOpt


def register(app: typer.Typer) -> None:
    config_app = typer.Typer(help="Show the resolved configuration.", no_args_is_help=True)
    app.add_typer(config_app, name="config")

    @config_app.command("show")
    def show(profile: Optional[str] = ProfileOpt, json: bool = JsonOpt):
        """Print the resolved profile (embedded defaults + your file)."""
        from parity.cli.common import make_context
        from parity.config import as_dict

        ctx = make_context(profile, json)  # with --host: shows the profile as the remote resolves it
        prof, out = ctx.profile, ctx.out
        from parity.redact import tree

        data = tree(as_dict(prof))  # a source url's token, an engine env's secret: not printed

        def human():
            import yaml

            out.console.print(f"# profile {prof.name} (from {prof.source_file})", markup=False)
            out.console.print(yaml.safe_dump(data, sort_keys=False, width=120), markup=False)

        out.emit(data, human)

    @config_app.command("which")
    def which(profile: Optional[str] = ProfileOpt, json: bool = JsonOpt):
        """Which profile a command run here loads, and why: -p, else $PARITY_PROFILE, else a parity.yaml
        here or above, else smoke."""
        from parity.cli import state
        from parity.config import choose_profile, load_profile, resolve_profile_path
        from parity.ui import Output

        if state.host:
            from parity.cli.common import make_context

            make_context(profile, json)  # --host: asked there (this exits)
        choice = choose_profile(profile)
        prof = load_profile(choice.profile)  # a profile that does not load is the same one-line error any command gives
        doc = {"profile": prof.name, "source": choice.source, "why": choice.why, "value": choice.profile,
               "path": str(resolve_profile_path(choice.profile)[0]), "project_file": choice.project_file}  # fmt: skip
        out = Output(json, state.verbose)
        out.emit(doc, lambda: out.info(f"{prof.name} ({choice.why})\n  profile file: {doc['path']}"))

    @config_app.command("list")
    def list_profiles(json: bool = JsonOpt):
        """List the embedded profiles."""
        from parity.config import available_profiles
        from parity.ui import Output

        names = available_profiles()
        Output(json).emit(names, lambda: print("\n".join(names)))

    @config_app.command("schema")
    def schema(out: Optional[str] = typer.Option(None, "--out", "-o", metavar="FILE", help="Write it to FILE instead of stdout.")):
        """JSON Schema of a profile file, for editors (e.g. `# yaml-language-server: $schema=FILE`)."""
        import json as jsonlib

        from parity.config import json_schema

        text = jsonlib.dumps(json_schema(), indent=2, sort_keys=True) + "\n"
        if out is None:
            print(text, end="")
            return
        from parity.files import atomic_write_text
        from parity.errors import UsageError

        try:
            atomic_write_text(__import__("pathlib").Path(out), text)
        except OSError as e:
            raise UsageError(f"--out {out}: {e.strerror}") from None
