"""Logic behind `parity lock status|acquire|release|wait|run` (the command module only parses)."""

from __future__ import annotations

import os
import sys
import time

from parity.errors import InfraError, UsageError


def _setup(lock_dir, profile, json_mode, who=None, run_id=None):
    from parity.commands.common import make_context
    from parity.lock import GpuLock

    ctx = make_context(profile, json_mode)
    return ctx, GpuLock(ctx.profile.lock, lock_dir, run_id, who)


def _run_id(kind: str) -> str:
    return f"{kind}-{time.strftime('%Y%m%d_%H%M%S')}-{os.getpid()}"


def status(lock_dir, profile, json_mode) -> int:
    from parity.preflight import preflight

    ctx, lock = _setup(lock_dir, profile, json_mode)
    st = lock.read()
    pf = preflight(ctx.runner, ctx.profile.lock)
    ready = lock.acquirable(st) and pf["idle"]
    doc = {"dir": str(lock.dir), **st.to_dict(), "preflight": pf, "free_and_idle_now": ready}

    def human():
        ctx.out.info(f"lock {lock.dir}: {st.describe()}")
        if st.raw.strip():
            ctx.out.info(f"  owner file: {st.raw.strip()}")
        ctx.out.info(f"gpu: {pf['gpu']}")
        ctx.out.info(f"docker: {pf['docker']}")
        verdict = "free and idle now" if ready else "busy"
        ctx.out.info(f"verdict: {verdict} (a wait needs {ctx.profile.lock.idle_checks} consecutive free+idle checks, lock.poll_s {ctx.profile.lock.poll_s:g} s apart)")

    ctx.out.emit(doc, human)
    return 0


def acquire(owner, pid, break_stale, no_wait, lock_dir, timeout, profile, json_mode) -> int:
    from parity.lock import pid_alive, wait_and_acquire

    if pid is not None and (pid <= 0 or not pid_alive(pid)):
        raise UsageError(f"--pid {pid}: no such live process on this host")
    ctx, lock = _setup(lock_dir, profile, json_mode, who=owner, run_id=_run_id("acquire"))
    try:
        if no_wait:
            from parity.preflight import preflight

            pf = preflight(ctx.runner, ctx.profile.lock)
            if not pf["idle"]:
                raise InfraError(f"GPU not idle: gpu: {pf['gpu']}; docker: {pf['docker']}")
            ok, st = lock.try_acquire(break_stale, pid)
            if not ok:
                raise InfraError(f"lock {lock.dir} is taken: {st.describe()}")
        else:
            wait_and_acquire(lock, ctx.runner, ctx.out, timeout, break_stale, pid=pid)
    except KeyboardInterrupt:
        if lock.held:  # interrupted right after the write: the user did not get the lock
            lock.release()
        raise
    lasts = f"until `parity lock release{' --owner ' + owner if owner else ''}`" if pid is None else f"while pid {pid} lives"
    doc = {"dir": str(lock.dir), "owner": lock.record, "standalone": pid is None}
    ctx.out.emit(doc, lambda: ctx.out.info(f"acquired {lock.dir}: {lock.record} (held {lasts})"))
    return 0


def release(owner, force, lock_dir, profile, json_mode) -> int:
    from parity.lock import hostname, pid_alive, whoami

    ctx, lock = _setup(lock_dir, profile, json_mode, who=owner)
    st = lock.read()
    if st.state == "legacy":
        raise UsageError(f"{lock.dir} is a legacy empty-directory lock held by an old harness; its holder releases it with rmdir, not parity")
    if st.state == "free":
        ctx.out.emit({"dir": str(lock.dir), "released": False, "state": "free"}, lambda: ctx.out.info(f"{lock.dir} is already {st.describe()}"))
        return 0
    o = st.owner
    me = owner or whoami()
    if not force and o.who != me:
        raise UsageError(f"{lock.dir} is held by {o.who}, not {me} (give --owner {o.who}, or --force to release anyway)")
    if not force and o.pid and o.host == hostname() and pid_alive(o.pid):
        raise UsageError(f"{lock.dir} is held by a running process (pid {o.pid}); stop it, or --force to release anyway")
    if not lock.release_other(st):
        raise InfraError(f"{lock.dir} changed while releasing; now: {lock.read().describe()}")
    ctx.out.emit({"dir": str(lock.dir), "released": True, "was": st.raw.strip()}, lambda: ctx.out.info(f"released {lock.dir} (was {st.describe()})"))
    return 0


def wait(lock_dir, timeout, break_stale, profile, json_mode) -> int:
    from parity.lock import wait_and_acquire

    ctx, lock = _setup(lock_dir, profile, json_mode)
    info = wait_and_acquire(lock, ctx.runner, ctx.out, timeout, break_stale, acquire=False)
    ctx.out.emit({"dir": str(lock.dir), "free_and_idle": True, **info}, lambda: ctx.out.info(f"{lock.dir}: free and GPU idle ({ctx.profile.lock.idle_checks} consecutive checks); nothing taken"))
    return 0


def run(cmd, break_stale, lock_dir, timeout, profile, json_mode) -> int:
    from parity.lock import holding

    cmd = list(cmd[1:] if cmd and cmd[0] == "--" else cmd)
    if not cmd:
        raise UsageError("lock run: give a command after --, e.g. parity lock run -- ./bench.sh")
    ctx, lock = _setup(lock_dir, profile, json_mode, run_id=_run_id("lockrun"))
    out_stream = sys.stderr if json_mode else sys.stdout

    def echo(stream: str, line: str) -> None:
        target = out_stream if stream == "stdout" else sys.stderr
        target.write(line + "\n")
        target.flush()

    with holding(lock, ctx.runner, ctx.out, timeout, break_stale):
        ctx.out.info(f"GPU lock {'inherited' if lock.inherited else 'taken'}: {lock.record}")
        res = ctx.runner.run(cmd, on_line=echo)
    if res.rc == 127 and res.stderr.endswith("command not found"):
        raise UsageError(res.stderr)
    rc = res.rc if res.rc is not None else 1
    if json_mode:
        ctx.out.emit({"dir": str(lock.dir), "owner": lock.record, "command": cmd, "rc": rc, "duration_s": round(res.duration_s, 3)})
    return rc
