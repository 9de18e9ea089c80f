"""The shared-GPU owner-file lock (~/gpu_bench_lock), compatible with the users' scripts.

On disk (seed 000_* section 3.1):
- `<dir>/owner` holds "<who> <epoch> [pid=N] [host=H] [run=ID] [pgids=G,G]": the users'
  scripts parse the first two fields; pgids lists the process groups the holder has
  running now (updated as they start and end).  "FREE ..." or no owner file means free.  Release writes
  "FREE released-by-<who> <epoch>" and keeps the dir.  A stale `<dir>/release` is
  cleared on acquire.
- legacy: an EMPTY `<dir>` is an mkdir/rmdir mutex held by an old harness.

Atomicity.  Among parity processes every read-check-write runs under flock on
`.<dir name>.parity-mutex` beside the dir (inside it would make the legacy "empty
dir" test and `rmdir` fail).  The other tools poll for FREE and then write the owner
non-atomically, so parity never overwrites what it did not read: right before it
renames its temp file over `owner` it re-checks the owner's inode/mtime/size and
content, and re-reads after the rename (a writer that lands after us wins, and we
do not hold).  A dir that does not exist is created with a plain mkdir, which is
atomic against the legacy harnesses' mkdir.

Stale holders: a pid that is dead on this host is reclaimed automatically; an
owner from another host, or older than lock.stale_age_s, only with --break-stale;
a live pid on this host never.  Before reclaiming a dead holder, what it left running
(its recorded process groups, and every process that inherited its lock record in
PARITY_GPU_LOCK) is killed and waited for, up to lock.reclaim_wait_s: the GPU is not
handed on while a killed holder's children still run on it.
"""

from __future__ import annotations

import fcntl
import getpass
import os
import signal
import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from parity import interrupts
from parity.gpu import held
from parity.gpu.held import PreparedUnderLock, held_here, refuse_while_held  # noqa: F401  (public here too)
from parity.gpu.lock_config import LockConfig
from parity.errors import InfraError, UsageError
from parity.gpu.preflight import preflight  # noqa: F401  (public: parity.gpu.lock.preflight)
from parity.artifacts import RunDir
from parity.options import positive_seconds
from parity.runners import lifetime
from parity.runners.lifetime import pid_alive
from parity.runners.local import add_group_listener, remove_group_listener

ENV_HELD = "PARITY_GPU_LOCK"  # "<dir>\t<owner record>" inherited by the children of a holder
AUTO, BREAK = "auto", "break-stale"


def hostname() -> str:
    return socket.gethostname()


def whoami() -> str:
    try:
        user = getpass.getuser()
    except Exception:
        user = str(os.getuid())
    return f"{user}@{hostname()}"


def fmt_age(s: float) -> str:
    s = int(max(0, s))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


# --------------------------------------------------------------------------- parsing


@dataclass
class Owner:
    who: str
    since: float | None
    pid: int | None = None
    host: str | None = None
    run: str | None = None
    pgids: list[int] = field(default_factory=list)
    gpus: list[int] = field(default_factory=list)  # the GPUs the holder's run uses (a crossover's); empty: not said


def base_record(record: str) -> str:
    """The record without its pgids= field (which changes while the lock is held)."""
    return " ".join(p for p in record.split() if not p.startswith("pgids="))


def parse_owner(text: str) -> Owner | None:
    """None for FREE/empty; else the owner (the first two fields are the users' "<who> <epoch>")."""
    parts = text.split()
    if not parts or parts[0].startswith("FREE"):
        return None
    o = Owner(parts[0], None)
    if len(parts) > 1:
        try:
            o.since = float(parts[1])
        except ValueError:
            pass
    for p in parts[2:]:
        k, _, v = p.partition("=")
        if k == "pid" and v.isdigit():
            o.pid = int(v)
        elif k == "host" and v:
            o.host = v
        elif k == "run" and v:
            o.run = v
        elif k == "pgids" and v:
            o.pgids = [int(x) for x in v.split(",") if x.isdigit()]
        elif k == "gpus" and v:
            o.gpus = [int(x) for x in v.split(",") if x.isdigit()]
    if o.host is None and "@" in o.who:
        o.host = o.who.rsplit("@", 1)[1]
    return o


def parse_free(text: str) -> tuple[str | None, float | None]:
    """("mudler", 1767300000.0) from "FREE released-by-mudler 1767300000"; (None, None) otherwise."""
    parts = text.split()
    if not parts or not parts[0].startswith("FREE"):
        return None, None
    who = next((p[len("released-by-") :] for p in parts if p.startswith("released-by-")), None)
    when = next((float(p) for p in reversed(parts) if p.isdigit()), None)
    return who, when


@dataclass
class LockState:
    state: str  # free | held | legacy
    owner: Owner | None = None
    raw: str = ""
    note: str = ""  # free: why; held: staleness / foreign-host remark
    reclaim: str | None = None  # AUTO (dead pid here) | BREAK (only with --break-stale) | None
    since: float | None = None  # held: owner epoch; legacy: dir mtime; free: release epoch
    stamp: tuple | None = None  # owner file (inode, mtime_ns, size) when read

    def age_s(self, now: float | None = None) -> float | None:
        return None if self.since is None else (now or time.time()) - self.since

    def describe(self, now: float | None = None) -> str:
        age = self.age_s(now)
        if self.state == "legacy":
            held = f" for {fmt_age(age)}" if age is not None else ""
            return f"held by a legacy harness{held} (empty lock directory: mkdir/rmdir convention; its holder releases with rmdir)"
        if self.state == "free":
            by, _ = parse_free(self.raw)
            if by:
                return f"free (released by {by}" + (f" {fmt_age(age)} ago)" if age is not None else ")")
            return f"free ({self.note or 'no owner'})"
        o = self.owner
        extra = ", ".join(x for x in (f"pid {o.pid}" if o.pid else "no pid", f"run {o.run}" if o.run else "",
                                      f"GPUs {','.join(map(str, o.gpus))}" if o.gpus else "") if x)
        held = f"for {fmt_age(age)}" if age is not None else "since an unknown time"
        s = f"held by {o.who} {held} ({extra})"
        if self.note:
            s += f"; {self.note}"
        if self.reclaim == AUTO:
            s += " -> reclaimable now"
        elif self.reclaim == BREAK:
            s += " -> reclaimable with --break-stale"
        return s

    def to_dict(self) -> dict:
        return {
            "state": self.state,
            "legacy": self.state == "legacy",
            "owner": asdict(self.owner) if self.owner else None,
            "raw": self.raw.strip() or None,
            "age_s": None if self.since is None else round(self.age_s(), 1),
            "note": self.note or None,
            "reclaim": self.reclaim,
            "description": self.describe(),
        }


def judge(o: Owner, cfg: LockConfig, here: str, now: float) -> tuple[str, str | None]:
    """(note, reclaim) for a held owner record."""
    age = None if o.since is None else now - o.since
    old = age is not None and age > cfg.stale_age_s
    if o.pid and o.host == here:
        if not pid_alive(o.pid):
            return f"STALE: pid {o.pid} is dead on this host", AUTO
        return "", None  # a live holder is never stolen
    if o.host and o.host != here:
        note = f"owner from another host ({o.host}): its pid cannot be checked from here"
        return (note + f"; older than lock.stale_age_s ({fmt_age(cfg.stale_age_s)})" if old else note), BREAK
    if old:
        return f"STALE: older than lock.stale_age_s ({fmt_age(cfg.stale_age_s)})", BREAK
    return "", None


def _stamp(path: Path) -> tuple | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


# --------------------------------------------------------------------------- signals


@contextmanager
def deferred_signals():
    """Hold SIGINT/SIGTERM/SIGHUP for the duration of a lock-file mutation, then deliver them.
    Python runs handlers in the main thread only, so replacing them is enough."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    old = {}
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        h = signal.getsignal(s)
        if h in (signal.SIG_IGN, None):
            continue
        old[s] = h
        signal.signal(s, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        for s in pending:
            h = old[s]
            if callable(h):
                h(s, None)
            else:
                signal.raise_signal(s)


@contextmanager
def sigterm_as_interrupt():
    """SIGTERM raises KeyboardInterrupt while a lock is held (parity.cli.main already does this)."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def _term(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, _term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


# --------------------------------------------------------------------------- the lock


LOCK_DIR_ENV = "PARITY_LOCK_DIR"


def effective_dir(cfg: LockConfig, lock_dir: str | None = None) -> Path:
    """The lock directory a run takes: --lock-dir, else PARITY_LOCK_DIR (set by --host
    delegation from hosts.NAME.lock_dir), else the profile's lock.dir.  Dry runs and
    `lock status` name the same one."""
    return Path(os.path.expanduser(lock_dir or os.environ.get(LOCK_DIR_ENV) or cfg.dir)).absolute()


class GpuLock:
    def __init__(self, cfg: LockConfig, lock_dir: str | None = None, run_id: str | None = None, who: str | None = None,
                 gpus=()):
        self.cfg = cfg
        self.gpus = [int(g) for g in gpus]  # named in the record (gpus=0,1): `lock status` shows them
        self.dir = effective_dir(cfg, lock_dir)
        self.owner_file = self.dir / "owner"
        self.mutex = self.dir.parent / f".{self.dir.name}.parity-mutex"
        self.run_id = " ".join(run_id.split()).replace(" ", "_") if run_id else None
        self.who = who or whoami()
        if not self.who or any(c.isspace() for c in self.who) or self.who.startswith("FREE"):
            raise UsageError(f"lock owner {self.who!r}: must be one word that does not start with FREE")
        self.held = False  # we wrote the current owner record and must release it
        self.inherited = False  # a parent process holds it for us (ENV_HELD)
        self.record = ""
        self.reclaimed: LockState | None = None  # the dead holder this acquire took over
        self._groups: list[int] = []
        self._groups_lock = threading.Lock()

    # ---- reading
    def read(self) -> LockState:
        try:
            entries = os.listdir(self.dir)
        except FileNotFoundError:
            return LockState("free", note="no lock directory")
        except NotADirectoryError:
            raise UsageError(f"lock dir {self.dir} is not a directory") from None
        except OSError as e:
            raise self._unusable(f"cannot list it: {e.strerror}") from None
        stamp = _stamp(self.owner_file)  # before reading: a change after this is caught by the re-check
        try:
            raw = self.owner_file.read_text(errors="replace")
        except IsADirectoryError:
            raise self._unusable(f"its owner file {self.owner_file} is a directory, not an owner record (remove it with rmdir if it is empty)") from None
        except PermissionError as e:
            raise self._unusable(f"cannot read {self.owner_file}: {e.strerror}") from None
        except FileNotFoundError:
            if not entries:
                stamp = _stamp(self.dir)
                if stamp is None:  # the legacy holder's rmdir raced our listdir
                    return LockState("free", note="no lock directory")
                return LockState("legacy", since=stamp[1] / 1e9)
            return LockState("free", note="no owner file")
        owner = parse_owner(raw)
        if owner is None:
            _, when = parse_free(raw)
            return LockState("free", raw=raw, note="" if raw.strip() else "empty owner file", since=when, stamp=stamp)
        note, reclaim = judge(owner, self.cfg, hostname(), time.time())
        return LockState("held", owner, raw, note, reclaim, owner.since, stamp)

    def acquirable(self, st: LockState, break_stale: bool = False) -> bool:
        if st.state == "free":
            return True
        if st.state == "held":
            return st.reclaim == AUTO or (break_stale and st.reclaim == BREAK)
        return False

    def is_mine(self, st: LockState) -> bool:
        return bool(self.record) and st.state == "held" and st.raw.strip() == self.record

    # ---- mutation (flock among parity processes + compare-before-rename against the rest)
    def _unusable(self, why: str) -> UsageError:
        return UsageError(f"lock dir {self.dir} (lock.dir / --lock-dir / {LOCK_DIR_ENV}): {why}")

    @contextmanager
    def _guard(self):
        try:
            self.mutex.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.mutex, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as e:
            raise self._unusable(f"cannot create {self.mutex.parent if not self.mutex.parent.is_dir() else self.mutex}: {e.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing drops the flock

    def _replace_owner(self, text: str, seen: LockState) -> bool:
        """Write owner := text unless it changed since `seen` was read; True when text is what is there now."""
        tmp = self.dir / f".owner.parity-{os.getpid()}-{threading.get_ident()}"
        try:
            try:
                with open(tmp, "w") as f:
                    f.write(text)
            except FileNotFoundError:  # the directory vanished (legacy rmdir): not ours, try again later
                return False
            except OSError as e:
                raise self._unusable(f"cannot write in it: {e.strerror}") from None
            if _stamp(self.owner_file) != seen.stamp or _read(self.owner_file) != (seen.raw if seen.stamp else None):
                return False
            os.replace(tmp, self.owner_file)
        finally:
            try:
                tmp.unlink()
            except FileNotFoundError:
                pass
        return _read(self.owner_file) == text

    def record_for(self, pid: int | None) -> str:
        fields = [self.who, str(int(time.time()))]
        if pid:
            fields.append(f"pid={pid}")
            if self.who.rsplit("@", 1)[-1] != hostname() or "@" not in self.who:
                fields.append(f"host={hostname()}")
        if self.run_id:
            fields.append(f"run={self.run_id}")
        if self.gpus:
            fields.append(f"gpus={','.join(map(str, self.gpus))}")
        return " ".join(fields)

    def try_acquire(self, break_stale: bool = False, pid: int | None = -1) -> tuple[bool, LockState]:
        """One atomic attempt.  pid=-1: this process; None: no pid (a standalone owner that
        outlives this process until `release` or the stale-age rule)."""
        with deferred_signals(), self._guard():
            st = self.read()
            if not self.acquirable(st, break_stale):
                return False, st
            if st.reclaim == AUTO and (left := self._stop_leftovers(st)):
                st.note += f"; its processes {', '.join(map(str, left[:8]))} still alive after lock.reclaim_wait_s ({fmt_age(self.cfg.reclaim_wait_s)})"
                return False, st
            if st.note == "no lock directory":
                try:
                    os.mkdir(self.dir)  # atomic against the legacy harnesses' mkdir
                except FileExistsError:
                    return False, self.read()
                except OSError as e:
                    raise self._unusable(f"cannot create it: {e.strerror}") from None
            record = self.record_for(os.getpid() if pid == -1 else pid)
            if not self._replace_owner(record + "\n", st):
                return False, self.read()
            self.record, self.held, self._groups = record, True, []
            self.reclaimed = st if st.state == "held" else None
            try:
                (self.dir / "release").unlink()
            except FileNotFoundError:
                pass
            return True, st

    def _stop_leftovers(self, st: LockState) -> list[int]:
        """Kill what a dead holder left running (its recorded groups, and every process that
        inherited its record) and wait until it is gone; returns the pids still alive."""

        # what inherited the dead holder's record is its own: killed.  A member of a recorded
        # group without it (a tool that cleared its environment) is waited for, not killed,
        # unless it started before the lock was taken (the group id was reused since).
        mine = lifetime.processes_with_env(ENV_HELD, f"{self.dir}\t{base_record(st.raw.strip())}")
        since = st.owner.since or 0
        members = [p for g in st.owner.pgids for p in lifetime.group_members(g) if p not in mine and (lifetime.started_at(p) or 0) >= since - 1]
        if not mine and not members:
            return []
        lifetime.kill_pids(mine)
        left = lifetime.wait_gone(mine + members, self.cfg.reclaim_wait_s)
        if not left:
            st.note += f"; killed what it left running (pids {', '.join(map(str, (mine + members)[:8]))})"
        return left

    def group_event(self, event: str, pgid: int) -> None:
        """A LocalRunner group started/ended while we hold the lock: keep pgids= in the owner
        record current, so a reclaimer after a SIGKILL knows what to wait for."""
        if not self.held:
            return
        with self._groups_lock:
            groups = [g for g in self._groups if g != pgid] + ([pgid] if event == "start" else [])
            record = base_record(self.record) + (f" pgids={','.join(map(str, groups))}" if groups else "")
            with deferred_signals(), self._guard():
                st = self.read()
                if not self.is_mine(st):
                    return  # broken by someone: not ours to write any more
                if self._replace_owner(record + "\n", st):
                    self.record, self._groups = record, groups

    def release(self) -> bool:
        """Write FREE if the owner is still our record; True when we released it."""
        if not self.held:
            return False
        with deferred_signals(), self._guard():
            st = self.read()
            self.held = False
            if not self.is_mine(st):
                return False  # broken by someone (--break-stale / --force): not ours to free
            return self._replace_owner(f"FREE released-by-{self.who} {int(time.time())}\n", st)

    def release_other(self, st: LockState) -> bool:
        """Free a record we did not write (CLI `release`), only if it is still exactly `st`."""
        with deferred_signals(), self._guard():
            now = self.read()
            if now.state != "held" or now.raw != st.raw:
                return False
            return self._replace_owner(f"FREE released-by-{self.who} {int(time.time())}\n", now)

    def adopt_inherited(self) -> bool:
        """True when a parent process holds this lock for us (ENV_HELD names this dir and the current owner)."""
        value = os.environ.get(ENV_HELD, "")
        d, _, rec = value.partition("\t")
        if not rec or Path(d) != self.dir:
            return False
        st = self.read()
        if st.state == "held" and base_record(st.raw.strip()) == rec and st.reclaim != AUTO:
            self.record, self.inherited = rec, True
            return True
        return False

    def env_value(self) -> str:
        return f"{self.dir}\t{base_record(self.record)}"


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return None


# --------------------------------------------------------------------------- waiting


def _status_line(st: LockState, pf: dict | None, streak: int, need: int, full: bool = False) -> str:
    """The progress line (short) or the timeout message (full)."""
    if full:
        lock = st.describe()
    elif st.state == "held":
        lock = f"held by {st.owner.who} {fmt_age(st.age_s() or 0)}" + {AUTO: " (dead: reclaimable)", BREAK: " (--break-stale)", None: ""}[st.reclaim]
    else:
        lock = {"legacy": "legacy mkdir lock held", "free": "lock free"}[st.state]
    if pf is None:
        idle = "gpu not checked while the lock is taken"
    elif full:
        idle = f"gpu: {pf['gpu']}; docker: {pf['docker']}"
    else:
        idle = f"gpu {'idle' if pf['gpu_idle'] else 'busy'}, docker {'idle' if pf['docker_idle'] else 'busy'}"
    return f"{lock} | {idle} | free+idle {streak}/{need}"


def wait_and_acquire(
    lock: GpuLock,
    runner,
    out,
    timeout: float | None = None,
    break_stale: bool = False,
    check_idle: bool = True,
    pid: int | None = -1,
    acquire: bool = True,
) -> dict:
    """Poll until the lock is free AND the GPU idle for lock.idle_checks consecutive checks,
    then take it (acquire=False: just return).  Timeout -> InfraError.  Returns the last check."""

    cfg = lock.cfg
    timeout = cfg.timeout_s if timeout is None else positive_seconds(timeout, "lock timeout")
    start = time.monotonic()
    streak, prog, task = 0, None, None
    try:
        while True:
            interrupts.check()  # a signal whose KeyboardInterrupt could not be raised where it landed
            st = lock.read()
            free = lock.acquirable(st, break_stale)
            pf = preflight(runner, cfg) if free and check_idle else None
            streak = streak + 1 if free and (pf is None or pf["idle"]) else 0
            last = {"lock": st.describe(), "lock_state": st.state, **({k: v for k, v in pf.items() if k != "detail"} if pf else {})}
            if streak >= cfg.idle_checks:
                if not acquire:
                    return last
                ok, seen = lock.try_acquire(break_stale, pid)
                if ok:
                    if seen.state == "held":
                        out.warn(f"reclaimed {lock.dir}: was {seen.describe()}")
                    return last
                streak = 0
            elapsed = time.monotonic() - start
            if elapsed >= timeout:
                raise InfraError(f"GPU lock {lock.dir} not {'acquired' if acquire else 'free and idle'} within {fmt_age(timeout)}: {_status_line(st, pf, streak, cfg.idle_checks, full=True)}")
            if prog is None and elapsed >= 1.0:  # quiet when the lock comes at once
                prog = out.progress()
                prog.start()
                out.info(f"waiting for the GPU lock {lock.dir} (free + idle for {cfg.idle_checks} checks, {fmt_age(cfg.poll_s)} apart; timeout {fmt_age(timeout)})")
                task = prog.add_task("GPU lock (s)", total=max(1, int(timeout)), status="")
            if prog is not None:
                prog.update(task, completed=int(elapsed), status=_status_line(st, pf, streak, cfg.idle_checks))
            time.sleep(max(0.0, min(cfg.poll_s, timeout - elapsed)))
    finally:
        if prog is not None:
            prog.stop()


@contextmanager
def holding(lock: GpuLock, runner, out, timeout: float | None = None, break_stale: bool = False, check_idle: bool = True):
    """Wait, take the lock, yield the preflight info; release on any exit (error, SIGINT, SIGTERM)."""
    if lock.adopt_inherited():
        yield {"inherited": True, "lock": f"held by the parent process: {lock.record}"}
        return

    old_env = os.environ.get(ENV_HELD)
    with sigterm_as_interrupt():
        try:
            info = wait_and_acquire(lock, runner, out, timeout, break_stale, check_idle)
            os.environ[ENV_HELD] = lock.env_value()
            held.took(str(lock.dir))
            add_group_listener(lock.group_event)
            yield info
        finally:
            remove_group_listener(lock.group_event)
            held.gave_back(str(lock.dir))
            if lock.held:
                out.info("GPU lock released" if lock.release() else f"GPU lock {lock.dir} was taken over by someone else: left as it is")
            if old_env is None:
                os.environ.pop(ENV_HELD, None)
            else:
                os.environ[ENV_HELD] = old_env


@contextmanager
def held_lock(config: LockConfig, runner, out, run_dir=None, run_id: str | None = None, artifacts_root=None,
              timeout: float | None = None, break_stale: bool = False, gpus=()):
    """The GPU lock of `config` (the profile's lock section), released on any exit; lock.json in
    run_dir (a RunDir, or None); gpus: the indices the run uses, in the owner record.  Not
    re-entrant: session.locked keeps one hold per context."""
    if getattr(runner, "host", "local") != "local":
        raise UsageError("the GPU lock is taken by the parity that runs on the GPU host (use --host to delegate), not through a remote runner")
    lock = GpuLock(config, run_id=run_id, gpus=gpus)
    with holding(lock, runner, out, timeout, break_stale) as info:
        settle_reclaimed(lock, artifacts_root, out)
        if run_dir is not None:
            run_dir.write_json("lock.json", {"owner": lock.record, "dir": str(lock.dir), "inherited": lock.inherited, "preflight": info})
        out.info(f"GPU lock {'inherited' if lock.inherited else 'taken'}: {lock.record}")
        yield lock


def settle_reclaimed(lock: GpuLock, artifacts_root, out) -> None:
    """The holder we reclaimed died without closing its run: its manifest (when it lives in
    our artifacts root) says running forever -- mark it interrupted."""
    o = lock.reclaimed.owner if lock.reclaimed else None
    if not o or not o.run or artifacts_root is None:
        return

    rd = RunDir(Path(artifacts_root).expanduser() / o.run)
    if rd.manifest_path.is_file() and rd.settle(f"the GPU lock reclaim by {lock.who}"):
        out.warn(f"run {rd.path} of the dead lock holder marked interrupted")
