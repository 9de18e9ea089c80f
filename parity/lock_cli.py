"""Logic behind `parity lock ...`."""

from __future__ import annotations

import sys

from parity.errors import UsageError


def _setup(lock_dir, profile, json_mode, who=None, run_id=None):
    from parity.commands.common import make_context
    from parity.lock import GpuLock

    ctx = make_context(profile, json_mode)
    return ctx, GpuLock(ctx.profile.lock, lock_dir, run_id, who)


def status(lock_dir, profile, json_mode) -> int:
    from parity.lock import preflight

    ctx, lock = _setup(lock_dir, profile, json_mode)
    st = lock.read()
    pf = preflight(ctx.runner, ctx.profile.lock)
    doc = {"dir": str(lock.dir), "state": st.state, "owner": st.raw.strip() or None, "stale": st.stale, "description": st.describe(), "legacy": st.state == "legacy", **pf}

    def human():
        ctx.out.info(f"lock {lock.dir}: {st.describe()}")
        ctx.out.info(f"gpu: {pf['gpu']}")
        ctx.out.info(f"docker: {pf['docker']}")

    ctx.out.emit(doc, human)
    return 0


def acquire(owner, pid, break_stale, no_wait, lock_dir, timeout, profile, json_mode) -> int:
    from parity.errors import InfraError
    from parity.lock import wait_and_acquire

    ctx, lock = _setup(lock_dir, profile, json_mode, who=owner)
    if no_wait:
        ok, st = lock.try_acquire(break_stale, pid)
        if not ok:
            raise InfraError(f"lock {lock.dir} is taken: {st.describe()}")
    else:
        wait_and_acquire(lock, ctx.runner, ctx.out, timeout, break_stale, pid=pid)
    doc = {"dir": str(lock.dir), "owner": lock.record}
    ctx.out.emit(doc, lambda: ctx.out.info(f"acquired {lock.dir}: {lock.record}  (release with `parity lock release{' --owner ' + owner if owner else ''}`)"))
    return 0


def release(owner, force, lock_dir, profile, json_mode) -> int:
    from parity.errors import InfraError
    from parity.lock import parse_owner

    ctx, lock = _setup(lock_dir, profile, json_mode, who=owner)
    st = lock.read()
    if st.state == "legacy":
        raise UsageError(f"{lock.dir} is a legacy empty-directory lock held by an old harness; it releases with rmdir, not parity")
    if st.state == "free":
        ctx.out.emit({"dir": str(lock.dir), "released": False, "state": "free"}, lambda: ctx.out.info(f"{lock.dir} is already free"))
        return 0
    o = parse_owner(st.raw)
    if not force and owner and o and o.who != owner:
        raise UsageError(f"{lock.dir} is held by {o.who}, not {owner} (use --force to release anyway)")
    lock.record = st.raw.strip()
    if not lock.release(force=True):
        raise InfraError(f"could not release {lock.dir}")
    ctx.out.emit({"dir": str(lock.dir), "released": True, "was": st.raw.strip()}, lambda: ctx.out.info(f"released {lock.dir} (was: {st.describe()})"))
    return 0


def wait(lock_dir, timeout, profile, json_mode) -> int:
    from parity.lock import wait_and_acquire

    ctx, lock = _setup(lock_dir, profile, json_mode)
    # take nothing: poll with a probe lock whose acquire step is skipped
    lock.try_acquire = lambda *a, **k: (True, lock.read())  # type: ignore[method-assign]
    info = wait_and_acquire(lock, ctx.runner, ctx.out, timeout)
    ctx.out.emit({"dir": str(lock.dir), "free_and_idle": True, **info}, lambda: ctx.out.info(f"{lock.dir}: free and GPU idle"))
    return 0


def run(cmd, break_stale, lock_dir, timeout, profile, json_mode) -> int:
    from parity.lock import wait_and_acquire

    cmd = [c for c in cmd if c != "--"] if cmd and cmd[0] == "--" else list(cmd)
    if not cmd:
        raise UsageError("lock run: give a command after --")
    import uuid

    ctx, lock = _setup(lock_dir, profile, json_mode, run_id=f"lockrun-{uuid.uuid4().hex[:8]}")
    wait_and_acquire(lock, ctx.runner, ctx.out, timeout, break_stale)
    try:
        res = ctx.runner.run(cmd, on_line=lambda s, ln: (sys.stdout if s == "stdout" else sys.stderr).write(ln + "\n"))
    finally:
        lock.release()
    if res.rc == 127 and res.stderr.endswith("command not found"):
        raise UsageError(res.stderr)
    return res.rc if res.rc is not None else 1
