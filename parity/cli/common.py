"""Options and helpers shared by every command (import-light: typer only)."""

from typing import Optional

import typer

PROFILE_HELP = ("Profile: an embedded name (smoke, gb10-qwen36) or a YAML file (default: $PARITY_PROFILE, else a "
                "parity.yaml here or above, else smoke; `parity config which`).")

ProfileOpt = typer.Option(None, "--profile", "-p", metavar="FILE|NAME", help=PROFILE_HELP)
JsonOpt = typer.Option(False, "--json", help="Print one JSON document on stdout; human output goes to stderr.")


def make_context(profile: Optional[str], json_mode: bool, default_profile: str | None = None):
    """Load the profile (parity.config.choose_profile: -p, $PARITY_PROFILE, a parity.yaml, else
    default_profile or smoke); with --host, run the command there instead (parity.hosts.delegation);
    else a local Context."""
    from pathlib import Path

    from parity.cli import command_argv, state
    from parity.config import FALLBACK_PROFILE, choose_profile, load_profile
    from parity.context import Context
    from parity.runners.local import LocalRunner
    from parity.ui import Output

    choice = choose_profile(profile, default_profile or FALLBACK_PROFILE)
    prof = load_profile(choice.profile)
    if state.host:
        from parity.hosts.registry import refuse_or_delegate

        refuse_or_delegate(state.host, prof, with_profile(command_argv(), choice), Path(state.artifacts))
    out = Output(json_mode, state.verbose)
    if choice.source in ("env", "file"):
        out.debug(f"profile {prof.name} ({choice.why})")
    return Context(profile=prof, runner=LocalRunner(), out=out, artifacts_root=Path(state.artifacts), host=state.host, argv=command_argv(), after_run=[record_run])


def with_profile(argv: list[str], choice) -> list[str]:
    """The command line a --host run ships: a default that came from this machine ($PARITY_PROFILE
    or a parity.yaml) is named with --profile, since the remote has neither (a file is uploaded)."""
    if choice.source not in ("env", "file"):
        return list(argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    return [*argv[:cut], "--profile", choice.profile, *argv[cut:]]


def record_run(run_dir, artifacts_root=None, warn=None):
    """The history hook (parity.history.record), loaded when a run ends, not at every start."""
    from parity.history.record import record_run

    return record_run(run_dir, artifacts_root, warn)


def parse_int_list(value: Optional[str], name: str) -> Optional[list[int]]:
    from parity.errors import UsageError

    if value is None:
        return None
    try:
        vals = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"{name}: expected comma-separated integers, got {value!r}") from None
    if not vals or any(v <= 0 for v in vals):
        raise UsageError(f"{name}: expected positive integers, got {value!r}")
    return vals


def parse_str_list(value: Optional[str]) -> Optional[list[str]]:
    if value is None:
        return None
    return [v.strip() for v in value.split(",") if v.strip()]


def render_go(out, doc: dict) -> None:
    """A dry run's go/no-go verdict (parity.gonogo), its reasons and where the evidence is."""
    g = doc["go_no_go"]
    verdict = "GO" if g["go"] else f"NO GO (exit {g['exit_code']})"
    out.info(f"go/no-go: {verdict}; lock: {g['lock']}" + "".join(f"\n  - {r['what']}" for r in g["reasons"]) + f"\n-> {doc['run_dir']} (hardware.txt, preflight.txt, go_no_go.json)")


def flag(name: str, extra: str = ""):
    """The typer option of a declared option (parity.options.OPTIONS): one flag, one help, every command."""
    from parity.options import OPTIONS

    o = OPTIONS[name]
    default = f" (default: {o.profile})" if o.profile else ""
    return typer.Option(None, o.flag, metavar=o.metavar, help=o.help + extra + default)
