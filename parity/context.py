"""The context every command and campaign step works in: profile, runner,
output, run directory.  `run_session` turns a block of work into a run dir
whose manifest ends complete / failed / interrupted, and stops every child
process on the way out."""

from __future__ import annotations

import os
import sys
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from parity.artifacts import RunDir
from parity.errors import ParityError
from parity.ui import Output
from parity.errors import OutputClosed
from parity.runners.local import stop_all

RUN_DIR_MARK = "__PARITY_RUN_DIR__"  # stderr line of a delegated run naming its run dir (parity.remote reads it)


@dataclass(frozen=True)
class Run:
    """What a measuring function writes to and runs with, and nothing of the profile: the run
    directory, the output, the runner (local or SSH) and the lock owner id."""

    dir: RunDir
    out: Output
    runner: Any  # parity.runners.base.Runner
    run_id: str | None = None


@dataclass
class Context:
    profile: Any  # parity.config.Profile
    runner: Any  # parity.runners.base.Runner
    out: Output
    artifacts_root: Path
    host: str | None = None
    run: RunDir | None = None
    vars: dict[str, Any] = field(default_factory=dict)
    run_id: str | None = None  # owner id for the GPU lock; defaults to the run dir name
    cleanup: ExitStack = field(default_factory=ExitStack)  # closed when the session ends (lock release...)
    end_status: str = "complete"  # what a session that ends without an error records (a dry run: "dry-run")
    argv: list[str] | None = None  # the command line after `parity` (the manifest's argv; None: this process's)
    after_run: list = field(default_factory=list)  # hook(run_dir, artifacts_root, warn) when a run dir ends (not a dry run); must not raise

    def require_run(self) -> RunDir:
        if self.run is None:
            raise RuntimeError("this operation needs a run directory")
        return self.run

    def as_run(self) -> Run:
        """The values a measuring function takes (the session's run directory must exist)."""
        return Run(self.require_run(), self.out, self.runner, self.run_id)


@contextmanager
def run_session(ctx: Context, kind: str, slug: str, argv: list[str] | None = None) -> Iterator[RunDir]:
    """Create a run dir on ctx, mark its end state whatever happens."""
    if argv is None:
        argv = ["parity", *ctx.argv] if ctx.argv is not None else sys.argv
    rd = RunDir.create(ctx.artifacts_root, slug, argv=argv, config=ctx.profile, kind=kind, host=ctx.host or "local")
    ctx.run = rd
    ctx.run_id = ctx.run_id or rd.run_id
    ctx.out.debug(f"run dir: {rd.path}")
    with run_session_existing(ctx, rd):
        yield rd


@contextmanager
def dry_run_session(ctx: Context, kind: str, slug: str) -> Iterator[RunDir]:
    """A run directory for a dry run (its go / no-go's evidence, parity.gonogo): status `dry-run`
    when it ends, whatever the verdict."""
    with run_session(ctx, kind, f"{slug}-dry-run") as rd:
        rd.update(dry_run=True)
        ctx.end_status = "dry-run"
        yield rd


def interruption(e: BaseException) -> str:
    """Why a run was interrupted, in words (the manifest's error)."""
    import re
    import signal

    delegated = os.environ.get("PARITY_DELEGATED")  # parity.hosts.delegation.DELEGATED_ENV: the delegating host
    lost = f"; the SSH connection to the delegating parity on {delegated} was lost" if delegated else ""
    if isinstance(e, (OutputClosed, BrokenPipeError)):
        return f"interrupted: output stream closed{lost or ' (its reader went away)'}"
    m = re.fullmatch(r"signal (\d+)", str(e))
    if not m:
        return "interrupted by SIGINT"
    num = int(m.group(1))
    name = signal.Signals(num).name if num in signal.valid_signals() else f"signal {num}"
    if num == signal.SIGHUP and delegated:  # the remote watchdog hangs up when the channel closes
        return f"interrupted by SIGHUP{lost}"
    return f"interrupted by {name}"


@contextmanager
def run_session_existing(ctx: Context, rd: RunDir) -> Iterator[RunDir]:
    announce = os.environ.pop("PARITY_RUN_DIR_FILE", None)  # set by a delegating `parity --host` (parity.hosts.delegation); first session only
    if announce:
        Path(announce).write_text(str(rd.path.resolve()) + "\n")
        sys.stderr.write(f"{RUN_DIR_MARK} {rd.path.resolve()}\n")  # the delegating side knows it even if the connection drops
        sys.stderr.flush()
    try:
        with ctx.cleanup:
            yield rd
    except (KeyboardInterrupt, BrokenPipeError) as e:
        stop_all()
        rd.finish("interrupted", interruption(e))
        raise
    except ParityError as e:
        stop_all()
        rd.finish("failed", str(e))
        raise
    except BaseException as e:
        stop_all()
        rd.finish("failed", f"{type(e).__name__}: {e}")
        raise
    else:
        rd.finish(ctx.end_status)
    finally:
        if ctx.end_status != "dry-run":  # e.g. the run's cells into the history store (the CLI adds it); never fails the run
            for hook in ctx.after_run:
                hook(rd.path, ctx.artifacts_root, ctx.out.warn)
