"""Human output (rich, lazily imported) vs machine output (--json on stdout)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable
from parity.errors import OutputClosed
from parity import redact
from parity.files import json_default
from parity.results import plain

# what rich's Text strips from a plain line (bell, backspace, vertical tab, form feed, CR)
_CONTROL = dict.fromkeys((7, 8, 11, 12, 13))


def _plain_stream(stderr: bool):
    """The stream itself where rich would only style a plain line (not a terminal, no
    FORCE_COLOR): rich's import is ~50 ms of a parity start, and most starts print only lines
    into a log or a pipe (the suite makes ~650).  The line goes out as rich prints it, less
    its emoji codes and tab expansion: data such as ":warning:" or a TSV row stays verbatim.
    None: use rich."""
    f = sys.stderr if stderr else sys.stdout
    if os.environ.get("FORCE_COLOR") or os.environ.get("TTY_COMPATIBLE") == "1":
        return None
    try:
        return None if f.isatty() else f
    except (AttributeError, ValueError):  # replaced or closed
        return None


def _output_closed(f):
    """The reader of f went away: an interrupt, not a failure (rich's own handler exits 1,
    which a run dir would record as `failed: SystemExit: 1`)."""

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, f.fileno())  # no second broken pipe at exit
    return OutputClosed("output stream closed")


def _write_line(f, msg: str) -> None:
    try:
        f.write(msg.translate(_CONTROL) + "\n")
        f.flush()
    except BrokenPipeError:
        raise _output_closed(f) from None


def _console(stderr: bool):
    """A rich Console whose broken pipe is an interrupt (_output_closed)."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            raise _output_closed(sys.stderr if stderr else sys.stdout)

    return _Console(stderr=stderr, highlight=False, soft_wrap=True)


class Output:
    """In --json mode stdout carries exactly one JSON document and all human
    output goes to stderr; otherwise human output goes to stdout."""

    def __init__(self, json_mode: bool = False, verbose: int = 0):
        self.json_mode = json_mode
        self.verbose = verbose
        self._console = None
        self._err = None

    @property
    def console(self):
        if self._console is None:
            self._console = _console(stderr=self.json_mode)
        return self._console

    @property
    def err(self):
        if self._err is None:
            self._err = _console(stderr=True)
        return self._err

    def _line(self, stderr: bool, msg: str, style: str | None = None) -> None:
        msg = redact.text(str(msg))  # a URL's password never reaches a terminal or a log
        f = _plain_stream(stderr)
        if f is not None:
            _write_line(f, msg)
        else:
            (self.err if stderr else self.console).print(msg, markup=False, style=style)

    def info(self, msg: str) -> None:
        self._line(self.json_mode, msg)

    def debug(self, msg: str) -> None:
        if self.verbose:
            self._line(True, msg, "dim")

    def warn(self, msg: str) -> None:
        self._line(True, f"warning: {msg}", "yellow")

    def emit(self, data: Any, human: Callable[[], None] | None = None) -> None:
        """The command's result: JSON on stdout in --json mode, else human()."""
        if self.json_mode:
            # JSON has no NaN / inf: a non-finite number (a user's file, a 0/0) prints as null
            doc = redact.tree(plain(json.loads(json.dumps(data, default=json_default))))  # no URL password either
            sys.stdout.write(json.dumps(doc, indent=2) + "\n")
            sys.stdout.flush()
        elif human is not None:
            human()
        else:
            self.console.print_json(json.dumps(data, default=json_default))

    def table(self, title: str | None, columns: list[str], rows: list[list[Any]]):
        from rich.table import Table
        from rich.text import Text

        # Text, not str: cells such as "[ok]" or "MUL_MAT(type_a=[...])" are data, not rich markup
        t = Table(title=Text(title) if title else None, title_justify="left")
        for c in columns:
            t.add_column(Text(c))
        for r in rows:
            t.add_row(*[Text("" if v is None else str(v)) for v in r])
        (self.err if self.json_mode else self.console).print(t)

    def progress(self, transient: bool = True):
        """A rich Progress on stderr (never pollutes --json stdout)."""
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        return Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[status]}"),
            console=self.err,
            transient=transient,
        )
