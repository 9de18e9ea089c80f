"""parity CLI: a thin typer app.  One module per command group (parity/cli/*.py):
each parses options, builds one typed request, calls one domain function and
renders its result.  Heavy modules are imported inside the commands."""

import os
import signal
import sys
from typing import Optional

import typer

from parity import __version__

COMMAND_MODULES = [
    "config",
    "doctor",
    "models",
    "build",
    "lock",
    "hw",
    "gate",
    "snapshot",
    "capacity",
    "profile",
    "report",
    "campaign",
    "levers",
    "bisect",
    "matrix",
    "history",
]

app = typer.Typer(
    name="parity",
    help="Gated, reproducible performance parity: paged llama.cpp vs vLLM on a shared GPU.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


class State:
    artifacts: str = os.environ.get("PARITY_ARTIFACTS", "runs")
    host: Optional[str] = None
    verbose: int = 0
    argv: Optional[list] = None  # the command line after `parity` (main's argv, or sys.argv[1:])


state = State()


def command_argv() -> list[str]:
    """The command line after `parity`: main's argv, or this process's."""
    return state.argv if state.argv is not None else sys.argv[1:]


def _version(value: bool):
    if value:
        print(f"parity {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    artifacts: str = typer.Option(state.artifacts, "--artifacts", metavar="DIR", help="Where run directories go (env PARITY_ARTIFACTS)."),
    host: Optional[str] = typer.Option(None, "--host", metavar="NAME", help="Run on a remote host from the profile or ~/.ssh/config."),
    verbose: int = typer.Option(0, "-v", "--verbose", count=True, help="More output (-vv for commands)."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
):
    state.artifacts = artifacts
    state.host = None if host in (None, "", "local", "localhost") else host
    state.verbose = verbose


for _name in COMMAND_MODULES:
    __import__(f"parity.cli.{_name}", fromlist=["register"]).register(app)


def main(argv: list[str] | None = None) -> int:
    from parity import interrupts

    signals: list[int] = []
    interrupts.reset()

    def _term(signum, frame):
        # the first signal interrupts; later ones must not break the (bounded) cleanup
        signals.append(signum)
        interrupts.note(signum)
        if len(signals) == 1 and not _in_fork_hook(frame):
            raise KeyboardInterrupt(f"signal {signum}")

    previous = {sig: signal.signal(sig, _term) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        return _main(argv, signals)
    finally:  # an embedding process (a test, a script) gets its own handlers back
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _main(argv: list[str] | None, signals: list[int]) -> int:
    from parity.errors import EXIT_USAGE, ParityError

    cmd = typer.main.get_command(app)
    state.argv = list(argv) if argv is not None else sys.argv[1:]
    try:
        rv = cmd.main(args=argv, prog_name="parity", standalone_mode=False)
        if signals:  # typer turns KeyboardInterrupt into a plain return of 130
            return _interrupted()
        return rv if isinstance(rv, int) else 0
    except ParityError as e:
        if signals:  # a failure caused by the interruption itself
            return _interrupted()
        _one_line(str(e))
        return e.exit_code
    except KeyboardInterrupt:
        return _interrupted()
    except typer.Exit as e:
        return _interrupted() if signals else e.exit_code
    except Exception as e:  # click usage errors and the like
        try:  # newer typer vendors click: its parser raises typer._click exceptions
            from typer._click.exceptions import ClickException
        except ImportError:
            from click.exceptions import ClickException

        if isinstance(e, typer.Abort):  # click turns KeyboardInterrupt into Abort
            return _interrupted()
        if isinstance(e, ClickException) and type(e).__name__ == "NoArgsIsHelpError":
            sys.stderr.write(e.format_message() + "\n")  # the help text, as click does
            return EXIT_USAGE
        if isinstance(e, ClickException):
            if os.environ.get("PARITY_DEBUG"):
                raise
            _one_line(e.format_message() if hasattr(e, "format_message") else str(e))
            return EXIT_USAGE if e.exit_code == 2 else e.exit_code
        if os.environ.get("PARITY_DEBUG"):
            raise
        _one_line(f"internal error: {type(e).__name__}: {e} (set PARITY_DEBUG=1 for the traceback)")
        return 1


FORK_HOOKS = {"_acquireLock", "_releaseLock", "_after_at_fork_child_reinit_locks"}  # logging's os.register_at_fork callbacks


def _in_fork_hook(frame) -> bool:
    """A signal landing in an at-fork callback (logging's, around every subprocess spawn): an
    exception raised there is printed as "Exception ignored" and dropped, so the handler leaves
    it to the loops' interrupts.check() instead."""
    for _ in range(4):
        if frame is None:
            return False
        if frame.f_code.co_name in FORK_HOOKS and frame.f_code.co_filename.endswith("logging/__init__.py"):
            return True
        frame = frame.f_back
    return False


def _interrupted() -> int:
    from parity.errors import EXIT_INTERRUPTED
    from parity.runners.local import stop_all

    stop_all()
    _one_line("interrupted")
    return EXIT_INTERRUPTED


def _one_line(msg: str) -> None:
    from parity.redact import text

    msg = text(" ".join(str(msg).split()))  # whatever an error quotes, a URL's password is not shown
    try:
        sys.stderr.write(f"parity: error: {msg}\n")
        sys.stderr.flush()
    except OSError:  # stderr is gone (a dropped SSH channel): nobody to tell
        pass


def entry() -> None:  # pragma: no cover
    from parity import openblas

    openblas.limit()  # before anything loads numpy
    sys.exit(main())
