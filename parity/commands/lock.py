"""parity lock status|acquire|release|wait|run"""

from __future__ import annotations

from typing import List, Optional

import typer

from parity.commands.common import JsonOpt, ProfileOpt

LockDirOpt = typer.Option(None, "--lock-dir", metavar="DIR", help="Lock directory (default: the profile's lock.dir, ~/gpu_bench_lock).")
TimeoutOpt = typer.Option(None, "--timeout", metavar="S", help="Give up after S seconds (default: lock.timeout_s, 2 h).")


def register(app: typer.Typer) -> None:
    lk = typer.Typer(help="The shared-GPU owner-file lock (~/gpu_bench_lock).", no_args_is_help=True)
    app.add_typer(lk, name="lock")

    @lk.command("status")
    def status(lock_dir: Optional[str] = LockDirOpt, profile: Optional[str] = ProfileOpt, json: bool = JsonOpt):
        """Who holds the lock, since when; and whether the GPU is idle."""
        from parity.lock_cli import status as impl

        raise typer.Exit(impl(lock_dir, profile, json))

    @lk.command("acquire")
    def acquire(
        owner: Optional[str] = typer.Option(None, "--owner", metavar="WHO", help="Owner name (default user@host). Without --pid the record has no pid, so it outlives this process: only `parity lock release` (or --break-stale past lock.stale_age_s) ends it."),
        pid: Optional[int] = typer.Option(None, "--pid", help="Tie the lock to this pid instead (reclaimed automatically once it dies)."),
        break_stale: bool = typer.Option(False, "--break-stale", help="Reclaim a stale holder from another host or past lock.stale_age_s."),
        no_wait: bool = typer.Option(False, "--no-wait", help="Fail at once if the lock is taken."),
        lock_dir: Optional[str] = LockDirOpt,
        timeout: Optional[float] = TimeoutOpt,
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """Take the lock for a standalone owner (waits for free + idle GPU)."""
        from parity.lock_cli import acquire as impl

        raise typer.Exit(impl(owner, pid, break_stale, no_wait, lock_dir, timeout, profile, json))

    @lk.command("release")
    def release(
        owner: Optional[str] = typer.Option(None, "--owner", metavar="WHO", help="Release when WHO holds it (default: you, user@host)."),
        force: bool = typer.Option(False, "--force", help="Release whoever holds it, even a live process."),
        lock_dir: Optional[str] = LockDirOpt,
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """Write `FREE released-by-<who> <epoch>` to the owner file."""
        from parity.lock_cli import release as impl

        raise typer.Exit(impl(owner, force, lock_dir, profile, json))

    @lk.command("wait")
    def wait(
        lock_dir: Optional[str] = LockDirOpt,
        timeout: Optional[float] = TimeoutOpt,
        break_stale: bool = typer.Option(False, "--break-stale", help="Count a stale holder from another host or past lock.stale_age_s as free."),
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """Wait until the lock is free and the GPU idle (lock.idle_checks consecutive checks); take nothing."""
        from parity.lock_cli import wait as impl

        raise typer.Exit(impl(lock_dir, timeout, break_stale, profile, json))

    @lk.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
    def run(
        cmd: List[str] = typer.Argument(..., metavar="-- CMD ...", help="Command to run while holding the lock."),
        break_stale: bool = typer.Option(False, "--break-stale", help="Reclaim a stale holder from another host or past lock.stale_age_s."),
        lock_dir: Optional[str] = LockDirOpt,
        timeout: Optional[float] = TimeoutOpt,
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """Hold the lock (after the idle preflight) exactly while CMD runs; exit with its code."""
        from parity.lock_cli import run as impl

        raise typer.Exit(impl(cmd, break_stale, lock_dir, timeout, profile, json))
