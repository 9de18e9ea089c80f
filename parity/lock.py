"""The shared-GPU owner-file lock (~/gpu_bench_lock), compatible with the users' scripts.

Conventions on disk:
- `<dir>/owner` holds "<who> <epoch> [pid=N] [host=H] [run=ID]"; "FREE ..." or no
  owner file means free.  Release writes "FREE released-by-<who> <epoch>" and keeps the dir.
- legacy: an EMPTY `<dir>` is an mkdir/rmdir mutex held by an old harness.
- a stale `<dir>/release` file is cleared on acquire.
Atomicity among parity processes: every read-check-write of the owner file
happens under flock on `<dir>.parity-mutex` (beside the dir, so the legacy
"empty dir" test and `rmdir` keep working), and the owner file is replaced
with an atomic rename.
"""

from __future__ import annotations

import fcntl
import getpass
import os
import socket
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from parity.config import LockConfig
from parity.errors import InfraError, UsageError


def whoami() -> str:
    try:
        user = getpass.getuser()
    except Exception:
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


@dataclass
class Owner:
    who: str
    since: float | None
    pid: int | None = None
    host: str | None = None
    run: str | None = None
    raw: str = ""


@dataclass
class LockState:
    state: str  # free | held | legacy
    owner: Owner | None = None
    raw: str = ""
    stale: str | None = None  # why the holder is stale, or None

    def describe(self, now: float | None = None) -> str:
        now = now or time.time()
        if self.state == "free":
            return f"free ({self.raw.strip() or 'no owner file'})"
        if self.state == "legacy":
            return "held by a legacy harness (empty lock directory: mkdir/rmdir convention)"
        o = self.owner
        age = f"{_age(now - o.since)} ago" if o and o.since else "unknown time"
        who = o.who if o else "?"
        extra = ", ".join(x for x in (f"pid {o.pid}" if o and o.pid else "", f"run {o.run}" if o and o.run else "") if x)
        s = f"held by {who} since {age}" + (f" ({extra})" if extra else "")
        return s + (f"; STALE: {self.stale}" if self.stale else "")


def _age(s: float) -> str:
    s = int(max(0, s))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def parse_owner(text: str) -> Owner | None:
    """None for FREE/empty; else the owner (first two fields are the users' "<who> <epoch>")."""
    text = text.strip()
    if not text or text.startswith("FREE"):
        return None
    parts = text.split()
    o = Owner(parts[0], None, raw=text)
    if len(parts) > 1:
        try:
            o.since = float(parts[1])
        except ValueError:
            pass
    for p in parts[2:]:
        k, _, v = p.partition("=")
        if k == "pid" and v.isdigit():
            o.pid = int(v)
        elif k == "host":
            o.host = v
        elif k == "run":
            o.run = v
    if o.host is None and "@" in o.who:
        o.host = o.who.split("@", 1)[1]
    return o


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


class GpuLock:
    def __init__(self, cfg: LockConfig, lock_dir: str | None = None, run_id: str | None = None, who: str | None = None):
        self.cfg = cfg
        self.dir = Path(os.path.expanduser(lock_dir or cfg.dir))
        self.owner_file = self.dir / "owner"
        self.mutex = self.dir.with_name(self.dir.name + ".parity-mutex")
        self.run_id = run_id
        self.who = who or whoami()
        self.held = False
        self.record = ""

    @contextmanager
    def _guard(self):
        self.mutex.parent.mkdir(parents=True, exist_ok=True)
        with open(self.mutex, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def read(self) -> LockState:
        if not self.dir.exists():
            return LockState("free", raw="no lock directory")
        try:
            raw = self.owner_file.read_text()
        except FileNotFoundError:
            if not any(self.dir.iterdir()):
                return LockState("legacy")
            return LockState("free", raw="no owner file")
        owner = parse_owner(raw)
        if owner is None:
            return LockState("free", raw=raw)
        st = LockState("held", owner, raw)
        here = socket.gethostname()
        if owner.pid and owner.host == here and not _pid_alive(owner.pid):
            st.stale = f"pid {owner.pid} is dead on this host"
        elif owner.host and owner.host != here:
            st.stale = None  # cannot judge another host's pid; only age applies
        if not st.stale and owner.since and time.time() - owner.since > self.cfg.stale_age_s:
            st.stale = f"older than lock.stale_age_s ({_age(self.cfg.stale_age_s)})"
        return st

    def _reclaimable(self, st: LockState, break_stale: bool) -> bool:
        if st.state != "held" or not st.stale:
            return False
        o = st.owner
        same_host_dead = o and o.pid and o.host == socket.gethostname() and "dead" in st.stale
        return bool(same_host_dead or break_stale)

    def try_acquire(self, break_stale: bool = False, pid: int | None = -1) -> tuple[bool, LockState]:
        """One atomic attempt.  pid=-1: this process; None: no pid (standalone owner)."""
        with self._guard():
            st = self.read()
            if st.state == "held" and self.run_id and st.owner and st.owner.run == self.run_id:
                self.held = True  # re-entrant for the same run
                return True, st
            if st.state == "legacy" or (st.state == "held" and not self._reclaimable(st, break_stale)):
                return False, st
            self.dir.mkdir(parents=True, exist_ok=True)
            try:
                (self.dir / "release").unlink()
            except FileNotFoundError:
                pass
            pid = os.getpid() if pid == -1 else pid
            fields = [self.who, str(int(time.time())), f"pid={pid}" if pid else "pid=-", f"host={socket.gethostname()}"]
            if self.run_id:
                fields.append(f"run={self.run_id}")
            self.record = " ".join(fields)
            from parity.artifacts import atomic_write_text

            atomic_write_text(self.owner_file, self.record + "\n")
            self.held = True
            return True, st

    def release(self, force: bool = False) -> bool:
        with self._guard():
            st = self.read()
            mine = st.owner is not None and (st.owner.raw.strip() == self.record.strip() or (self.run_id and st.owner.run == self.run_id))
            if st.state != "held" or not (mine or force):
                self.held = False
                return False
            from parity.artifacts import atomic_write_text

            atomic_write_text(self.owner_file, f"FREE released-by-{self.who} {int(time.time())}\n")
            self.held = False
            return True


def preflight(runner, cfg: LockConfig) -> dict:
    """GPU idle + docker idle, each judged by policy when the tool cannot answer."""
    from parity import docker_cli, nvidia_smi

    apps, src = nvidia_smi.compute_apps(runner)
    if apps is None:
        gpu_idle, gpu_note = cfg.nvidia_smi_missing == "idle", f"{src}: counted as {cfg.nvidia_smi_missing} (lock.nvidia_smi_missing)"
    else:
        gpu_idle, gpu_note = not apps, f"{len(apps)} compute process(es) via {src}" + (f": {', '.join(str(a['pid']) for a in apps)}" if apps else "")
    d = docker_cli.running(runner)
    if d.state == "ok":
        busy = [c for c in d.containers if cfg.docker_filter is None or cfg.docker_filter in c]
        docker_idle, docker_note = not busy, (f"running: {', '.join(busy)}" if busy else f"no matching containers ({len(d.containers)} running)")
    elif d.state == "no-cli":
        docker_idle, docker_note = True, "docker not installed"
    else:
        docker_idle = cfg.docker_no_daemon == "idle"
        docker_note = f"{d.note}: counted as {cfg.docker_no_daemon} (lock.docker_no_daemon)"
    return {"idle": (gpu_idle or not cfg.require_idle_gpu) and docker_idle, "gpu_idle": gpu_idle, "gpu": gpu_note, "docker_idle": docker_idle, "docker": docker_note}


def wait_and_acquire(lock: GpuLock, runner, out, timeout: float | None = None, break_stale: bool = False, check_idle: bool = True, pid: int | None = -1) -> dict:
    """Poll until the lock is free AND the GPU idle for idle_checks consecutive checks, then take it."""
    cfg = lock.cfg
    timeout = cfg.timeout_s if timeout is None else timeout
    deadline = time.monotonic() + timeout
    streak, last = 0, {}
    with out.progress() as prog:
        task = prog.add_task("waiting for the GPU lock", total=None, status="")
        while True:
            st = lock.read()
            free = st.state == "free" or lock._reclaimable(st, break_stale) or (st.owner is not None and lock.run_id and st.owner.run == lock.run_id)
            pf = preflight(runner, cfg) if check_idle else {"idle": True}
            last = {"lock": st.describe(), **pf}
            streak = streak + 1 if free and pf["idle"] else 0
            prog.update(task, status=f"{st.describe()[:60]} | gpu {'idle' if pf.get('gpu_idle', True) else 'busy'} | ok {streak}/{cfg.idle_checks}")
            if streak >= cfg.idle_checks:
                ok, st2 = lock.try_acquire(break_stale, pid)
                if ok:
                    if st2.stale:
                        out.warn(f"reclaimed a stale lock: {st2.describe()}")
                    return last
                streak = 0
            if time.monotonic() >= deadline:
                raise InfraError(f"GPU lock not acquired within {timeout:.0f} s: {last.get('lock')}; gpu: {last.get('gpu', '?')}; docker: {last.get('docker', '?')}")
            time.sleep(cfg.poll_s)


@contextmanager
def held_lock(ctx, timeout: float | None = None, break_stale: bool = False):
    """The GPU lock for this context (re-entrant per ctx), released on any exit."""
    if ctx.vars.get("_gpu_lock") is not None:
        yield ctx.vars["_gpu_lock"]
        return
    host = ctx.profile.host(ctx.host) if ctx.host else None
    lock = GpuLock(ctx.profile.lock, host.lock_dir if host and host.lock_dir else None, ctx.run_id)
    info = wait_and_acquire(lock, ctx.runner, ctx.out, timeout, break_stale)
    ctx.vars["_gpu_lock"] = lock
    if ctx.run:
        ctx.run.write_json("lock.json", {"owner": lock.record, "dir": str(lock.dir), "preflight": info})
    ctx.out.info(f"GPU lock taken: {lock.record}")
    try:
        yield lock
    finally:
        lock.release()
        ctx.vars.pop("_gpu_lock", None)
        ctx.out.info("GPU lock released")


def campaign_step(ctx, options: dict) -> dict:
    """kind: lock -- take the GPU lock for the rest of the campaign (released when it ends)."""
    bad = set(options) - {"timeout_s", "break_stale"}
    if bad:
        raise UsageError(f"lock step: unknown option {sorted(bad)[0]}")
    lock = ctx.cleanup.enter_context(held_lock(ctx, options.get("timeout_s"), bool(options.get("break_stale"))))
    return {"owner": lock.record, "dir": str(lock.dir)}
