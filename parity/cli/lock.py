"""parity lock status|acquire|release|wait|run -> parity.gpu.lock_commands.<subcommand>"""

from typing import List, Optional

import typer

from parity.cli.common import JsonOpt, ProfileOpt

LockDirOpt = typer.Option(None, "--lock-dir", metavar="DIR", help="Lock directory (default: the profile's lock.dir, ~/gpu_bench_lock).")
TimeoutOpt = typer.Option(None, "--timeout", metavar="S", help="Give up after S seconds (default: lock.timeout_s, 2 h).")


def register(app: typer.Typer) -> None:
    lk = typer.Typer(help="The shared-GPU owner-file lock (~/gpu_bench_lock).", no_args_is_help=True)
    app.add_typer(lk, name="lock")

    @lk.command("status")
    def status(lock_dir: Optional[str] = LockDirOpt, profile: Optional[str] = ProfileOpt, json: bool = JsonOpt):
        """Who holds the lock, since when; and whether the GPU is idle."""
        doc, ctx = _call("status", profile, json, lock_dir=lock_dir)
        pf, lock = doc["preflight"], ctx.profile.lock

        def human():
            ctx.out.info(f"lock {doc['dir']}: {doc['description']}")
            if doc["raw"]:
                ctx.out.info(f"  owner file: {doc['raw']}")
            ctx.out.info(f"gpu: {pf['gpu']}")
            ctx.out.info(f"docker: {pf['docker']}")
            verdict = "free and idle now" if doc["free_and_idle_now"] else "busy"
            ctx.out.info(f"verdict: {verdict} (a wait needs {lock.idle_checks} consecutive free+idle checks, lock.poll_s {lock.poll_s:g} s apart)")

        ctx.out.emit(doc, human)

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
        doc, ctx = _call("acquire", profile, json, owner=owner, pid=pid, break_stale=break_stale, no_wait=no_wait, lock_dir=lock_dir, timeout=timeout)
        ctx.out.emit(doc, lambda: ctx.out.info(f"acquired {doc['dir']}: {doc['owner']} (held {doc['lasts']})"))

    @lk.command("release")
    def release(
        owner: Optional[str] = typer.Option(None, "--owner", metavar="WHO", help="Release when WHO holds it (default: you, user@host)."),
        force: bool = typer.Option(False, "--force", help="Release whoever holds it, even a live process."),
        lock_dir: Optional[str] = LockDirOpt,
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """Write `FREE released-by-<who> <epoch>` to the owner file."""
        doc, ctx = _call("release", profile, json, owner=owner, force=force, lock_dir=lock_dir)
        if doc["released"]:
            ctx.out.emit(doc, lambda: ctx.out.info(f"released {doc['dir']} (was {doc['description']})"))
        else:
            ctx.out.emit(doc, lambda: ctx.out.info(f"{doc['dir']} is already {doc['description']}"))

    @lk.command("wait")
    def wait(
        lock_dir: Optional[str] = LockDirOpt,
        timeout: Optional[float] = TimeoutOpt,
        break_stale: bool = typer.Option(False, "--break-stale", help="Count a stale holder from another host or past lock.stale_age_s as free."),
        profile: Optional[str] = ProfileOpt,
        json: bool = JsonOpt,
    ):
        """Wait until the lock is free and the GPU idle (lock.idle_checks consecutive checks); take nothing."""
        doc, ctx = _call("wait", profile, json, lock_dir=lock_dir, timeout=timeout, break_stale=break_stale)
        ctx.out.emit(doc, lambda: ctx.out.info(f"{doc['dir']}: free and GPU idle ({ctx.profile.lock.idle_checks} consecutive checks); nothing taken"))

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
        doc, ctx = _call("run", profile, json, command=list(cmd), break_stale=break_stale, lock_dir=lock_dir, timeout=timeout)
        if json:
            ctx.out.emit(doc)
        raise typer.Exit(doc["rc"])


def _call(name: str, profile, json_mode: bool, **options):
    """Build the LockRequest, call parity.gpu.lock_commands.<name>; (result, context)."""
    from parity.cli.common import make_context
    from parity.gpu import lock_commands

    ctx = make_context(profile, json_mode)
    return getattr(lock_commands, name)(ctx, lock_commands.LockRequest(**options)), ctx
