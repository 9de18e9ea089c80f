"""`parity lock status|acquire|release|wait|run`: one function per subcommand, each
taking the context and a LockRequest and returning a plain result."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field

from parity.errors import InfraError, UsageError
from parity.gpu.lock import GpuLock, holding, hostname, pid_alive, settle_reclaimed, wait_and_acquire, whoami
from parity.gpu.preflight import preflight
from parity.options import positive_seconds


@dataclass
class LockRequest:
    """Options of the lock subcommands (each reads the ones it needs)."""

    lock_dir: str | None = None
    timeout: float | None = None
    break_stale: bool = False
    owner: str | None = None  # acquire: the owner name; release: release when WHO holds it
    pid: int | None = None  # acquire: tie the lock to this pid
    no_wait: bool = False
    force: bool = False
    command: list[str] = field(default_factory=list)  # run: the command after --


def _lock(config, req: LockRequest, who=None, run_id=None) -> GpuLock:
    """The lock of `config` (the profile's lock section) at --lock-dir; --timeout checked."""
    if req.timeout is not None:
        req.timeout = positive_seconds(req.timeout, "--timeout")

    return GpuLock(config, req.lock_dir, run_id, who)


def _run_id(kind: str) -> str:
    return f"{kind}-{time.strftime('%Y%m%d_%H%M%S')}-{os.getpid()}"


def status(ctx, req: LockRequest) -> dict:
    lock = _lock(ctx.profile.lock, req)
    st = lock.read()
    pf = preflight(ctx.runner, ctx.profile.lock)
    ready = lock.acquirable(st) and pf["idle"]
    return {"dir": str(lock.dir), **st.to_dict(), "preflight": pf, "free_and_idle_now": ready}


def acquire(ctx, req: LockRequest) -> dict:
    owner, pid, timeout, break_stale = req.owner, req.pid, req.timeout, req.break_stale
    if pid is not None and (pid <= 0 or not pid_alive(pid)):
        raise UsageError(f"--pid {pid}: no such live process on this host")
    lock = _lock(ctx.profile.lock, req, who=owner, run_id=_run_id("acquire"))
    try:
        if req.no_wait:
            pf = preflight(ctx.runner, ctx.profile.lock)
            if not pf["idle"]:
                raise InfraError(f"GPU not idle: gpu: {pf['gpu']}; docker: {pf['docker']}")
            ok, st = lock.try_acquire(break_stale, pid)
            if not ok:
                raise InfraError(f"lock {lock.dir} is taken: {st.describe()}")
        else:
            wait_and_acquire(lock, ctx.runner, ctx.out, timeout, break_stale, pid=pid)
        settle_reclaimed(lock, ctx.artifacts_root, ctx.out)
    except KeyboardInterrupt:
        if lock.held:  # interrupted right after the write: the user did not get the lock
            lock.release()
        raise
    lasts = f"until `parity lock release{' --owner ' + owner if owner else ''}`" if pid is None else f"while pid {pid} lives"
    return {"dir": str(lock.dir), "owner": lock.record, "standalone": pid is None, "lasts": lasts}


def release(ctx, req: LockRequest) -> dict:
    owner, force = req.owner, req.force
    lock = _lock(ctx.profile.lock, req, who=owner)
    st = lock.read()
    if st.state == "legacy":
        raise UsageError(f"{lock.dir} is a legacy empty-directory lock held by an old harness; its holder releases it with rmdir, not parity")
    if st.state == "free":
        return {"dir": str(lock.dir), "released": False, "state": "free", "description": st.describe()}
    o = st.owner
    me = owner or whoami()
    if not force and o.who != me:
        raise UsageError(f"{lock.dir} is held by {o.who}, not {me} (give --owner {o.who}, or --force to release anyway)")
    if not force and o.pid and o.host == hostname() and pid_alive(o.pid):
        raise UsageError(f"{lock.dir} is held by a running process (pid {o.pid}); stop it, or --force to release anyway")
    if not lock.release_other(st):
        raise InfraError(f"{lock.dir} changed while releasing; now: {lock.read().describe()}")
    return {"dir": str(lock.dir), "released": True, "was": st.raw.strip(), "description": st.describe()}


def wait(ctx, req: LockRequest) -> dict:
    lock = _lock(ctx.profile.lock, req)
    info = wait_and_acquire(lock, ctx.runner, ctx.out, req.timeout, req.break_stale, acquire=False)
    return {"dir": str(lock.dir), "free_and_idle": True, **info}


def run(ctx, req: LockRequest) -> dict:
    """Hold the lock exactly while the command runs, its output streamed through; {"rc", ...}."""

    cmd = list(req.command[1:] if req.command and req.command[0] == "--" else req.command)
    if not cmd:
        raise UsageError("lock run: give a command after --, e.g. parity lock run -- ./bench.sh")
    lock = _lock(ctx.profile.lock, req, run_id=_run_id("lockrun"))
    out_stream = sys.stderr if ctx.out.json_mode else sys.stdout

    def echo(stream: str, line: str) -> None:
        target = out_stream if stream == "stdout" else sys.stderr
        target.write(line + "\n")
        target.flush()

    with holding(lock, ctx.runner, ctx.out, req.timeout, req.break_stale):
        settle_reclaimed(lock, ctx.artifacts_root, ctx.out)
        ctx.out.info(f"GPU lock {'inherited' if lock.inherited else 'taken'}: {lock.record}")
        res = ctx.runner.run(cmd, on_line=echo, timeout=ctx.profile.lock.run_timeout_s)
    if res.rc == 127 and res.stderr.endswith("command not found"):
        raise UsageError(res.stderr)
    if res.timed_out:
        raise InfraError(
            f"lock run: {cmd[0]} still running after lock.run_timeout_s ({res.duration_s:.0f} s of {ctx.profile.lock.run_timeout_s:g} s): "
            f"its process group was stopped and the lock {lock.dir} released"
        )
    rc = res.rc if res.rc is not None else 1
    return {"dir": str(lock.dir), "owner": lock.record, "command": cmd, "rc": rc, "duration_s": round(res.duration_s, 3)}
