"""The owner-file protocol: both conventions, stale rules, never overwriting a record parity did not read."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import parity.gpu.lock as L
from parity.config import LockConfig
from parity.errors import UsageError

HOST = L.hostname()


def cfg(**kw) -> LockConfig:
    return LockConfig(**{"poll_s": 0.01, "preflight": False, **kw})


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_parse_users_format_and_parity_format():
    o = L.parse_owner("mudler@promaxgb10 1767300000\n")
    assert (o.who, o.since, o.pid, o.host, o.run) == ("mudler@promaxgb10", 1767300000.0, None, "promaxgb10", None)
    o = L.parse_owner("mudler@promaxgb10 1767300000 pid=123 run=20260701_smoke")
    assert (o.pid, o.run) == (123, "20260701_smoke")
    o = L.parse_owner("codex 1767300000")  # the seeds' $ME may be a bare name
    assert o.host is None and o.who == "codex"
    assert L.parse_owner("FREE released-by-mudler 1767300000") is None
    assert L.parse_owner("FREE") is None and L.parse_owner("") is None
    assert L.parse_free("FREE released-by-mudler@gb10 1767300000\n") == ("mudler@gb10", 1767300000.0)


def test_acquire_release_roundtrip_keeps_users_fields(tmp_path):
    d = tmp_path / "gpu_bench_lock"
    lk = L.GpuLock(cfg(), str(d), run_id="20260701_000000_smoke")
    before = int(time.time())
    ok, _ = lk.try_acquire()
    after = time.time()
    assert ok and lk.held
    raw = (d / "owner").read_text()
    who, epoch, *rest = raw.split()
    assert who == L.whoami() and before <= int(epoch) <= after
    assert f"pid={os.getpid()}" in rest and "run=20260701_000000_smoke" in rest
    st = L.GpuLock(cfg(), str(d)).read()
    assert st.state == "held" and st.reclaim is None and "held by" in st.describe()
    # a second parity process (other GpuLock) cannot take it
    assert L.GpuLock(cfg(), str(d)).try_acquire()[0] is False
    assert lk.release() and (d / "owner").read_text().startswith(f"FREE released-by-{L.whoami()} ")
    assert d.is_dir()  # the dir stays (owner-file convention)
    assert L.GpuLock(cfg(), str(d)).read().describe().startswith(f"free (released by {L.whoami()}")


def test_legacy_empty_dir_is_held(tmp_path):
    d = tmp_path / "gpu_bench_lock"
    d.mkdir()
    lk = L.GpuLock(cfg(), str(d))
    st = lk.read()
    assert st.state == "legacy" and "legacy" in st.describe() and "rmdir" in st.describe()
    assert lk.try_acquire(break_stale=True)[0] is False
    assert list(d.iterdir()) == []  # untouched: the legacy holder can still rmdir it
    d.rmdir()
    assert lk.try_acquire()[0] is True


def test_legacy_rmdir_racing_our_read_is_free_not_a_crash(tmp_path, monkeypatch):
    """The legacy holder's rmdir lands between our listdir and the stat of the directory."""
    d = tmp_path / "gpu_bench_lock"
    lk = L.GpuLock(cfg(), str(d))
    monkeypatch.setattr(L.os, "listdir", lambda path: [])  # listdir saw the empty dir; it is gone now
    st = lk.read()
    assert (st.state, st.note) == ("free", "no lock directory")


def test_directory_vanishing_before_the_owner_write_is_a_lost_race(tmp_path):
    d = tmp_path / "gpu_bench_lock"
    lk = L.GpuLock(cfg(), str(d))
    seen = L.LockState("free", note="no owner file")
    assert lk._replace_owner("me 1\n", seen) is False and not d.exists()


def test_absent_owner_in_nonempty_dir_is_free_and_release_file_cleared(tmp_path):
    d = tmp_path / "lk"
    d.mkdir()
    (d / "release").write_text("stale\n")
    lk = L.GpuLock(cfg(), str(d))
    assert lk.read().state == "free"
    assert lk.try_acquire()[0] and not (d / "release").exists()


def test_dead_pid_on_this_host_is_reclaimed_automatically(tmp_path):
    d = tmp_path / "lk"
    d.mkdir()
    (d / "owner").write_text(f"someone@{HOST} {int(time.time())} pid={dead_pid()} run=x\n")
    lk = L.GpuLock(cfg(), str(d))
    st = lk.read()
    assert st.reclaim == L.AUTO and "dead" in st.describe()
    ok, seen = lk.try_acquire()
    assert ok and seen.state == "held" and (d / "owner").read_text().strip() == lk.record


def test_live_pid_is_never_stolen_even_old_with_break_stale(tmp_path):
    d = tmp_path / "lk"
    d.mkdir()
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        rec = f"someone@{HOST} {int(time.time()) - 10**6} pid={sleeper.pid}\n"
        (d / "owner").write_text(rec)
        lk = L.GpuLock(cfg(stale_age_s=60), str(d))
        assert lk.read().reclaim is None
        assert lk.try_acquire(break_stale=True)[0] is False
        assert (d / "owner").read_text() == rec
    finally:
        sleeper.kill()
        sleeper.wait()


def test_zombie_holder_counts_as_dead(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped: a zombie
    try:
        assert L.pid_alive(p.pid) is False
    finally:
        p.wait()


def test_other_host_and_old_records_need_break_stale(tmp_path):
    d = tmp_path / "lk"
    d.mkdir()
    foreign = f"mudler@other-host-xyz {int(time.time())} pid=1\n"
    (d / "owner").write_text(foreign)
    lk = L.GpuLock(cfg(), str(d))
    st = lk.read()
    assert st.reclaim == L.BREAK and "another host" in st.describe()
    assert lk.try_acquire()[0] is False and (d / "owner").read_text() == foreign
    assert lk.try_acquire(break_stale=True)[0] is True
    lk.release()
    old = f"mudler {int(time.time()) - 100}\n"  # users' format, no host, no pid
    (d / "owner").write_text(old)
    young = L.GpuLock(cfg(stale_age_s=1000), str(d))
    assert young.read().reclaim is None and young.try_acquire(break_stale=True)[0] is False
    aged = L.GpuLock(cfg(stale_age_s=50), str(d))
    assert "older than lock.stale_age_s" in aged.read().describe()
    assert aged.try_acquire()[0] is False and aged.try_acquire(break_stale=True)[0] is True


def test_users_script_owner_is_respected(tmp_path):
    """What fp4norm_profile.sh writes: `echo "$ME $(date +%s)" > owner`."""
    d = tmp_path / "lk"
    subprocess.run(["sh", "-c", f'mkdir -p {d}; echo "mudler@{HOST} $(date +%s)" > {d}/owner'], check=True)
    lk = L.GpuLock(cfg(), str(d))
    assert lk.read().state == "held" and lk.try_acquire(break_stale=True)[0] is False
    # and our FREE record is what their poll loop accepts: owner starts with FREE
    subprocess.run(["sh", "-c", f"echo 'FREE released-by-mudler 1' > {d}/owner"], check=True)
    assert lk.try_acquire()[0]
    lk.release()
    assert subprocess.run(["sh", "-c", f'case "$(cat {d}/owner)" in FREE*) exit 0;; *) exit 1;; esac']).returncode == 0


def test_external_write_between_check_and_rename_wins(tmp_path, monkeypatch):
    """A non-atomic tool writes its owner right after we read FREE: parity must not overwrite it."""
    d = tmp_path / "lk"
    d.mkdir()
    (d / "owner").write_text("FREE released-by-x 1\n")
    lk = L.GpuLock(cfg(), str(d))
    real_stamp = L._stamp
    calls = {"n": 0}

    def racing_stamp(path):
        calls["n"] += 1
        if calls["n"] == 2:  # the re-check right before the rename
            (d / "owner").write_text("other@tool 1767300000\n")
        return real_stamp(path)

    monkeypatch.setattr(L, "_stamp", racing_stamp)
    ok, _ = lk.try_acquire()
    assert not ok and not lk.held
    assert (d / "owner").read_text() == "other@tool 1767300000\n"
    assert sorted(p.name for p in d.iterdir()) == ["owner"]  # no temp file left behind


def test_release_does_not_free_a_record_that_is_not_ours(tmp_path):
    d = tmp_path / "lk"
    lk = L.GpuLock(cfg(), str(d))
    assert lk.try_acquire()[0]
    (d / "owner").write_text("breaker@elsewhere 1767300000\n")  # someone broke it with --break-stale
    assert lk.release() is False and not lk.held
    assert (d / "owner").read_text() == "breaker@elsewhere 1767300000\n"


def test_standalone_record_has_no_pid(tmp_path):
    d = tmp_path / "lk"
    lk = L.GpuLock(cfg(), str(d), who="alice")
    assert lk.try_acquire(pid=None)[0]
    o = L.parse_owner((d / "owner").read_text())
    assert o.who == "alice" and o.pid is None
    with pytest.raises(UsageError):
        L.GpuLock(cfg(), str(d), who="two words")
    with pytest.raises(UsageError):
        L.GpuLock(cfg(), str(d), who="FREEDOM")


def test_owner_with_pid_and_bare_name_records_host(tmp_path):
    lk = L.GpuLock(cfg(), str(tmp_path / "lk"), who="bench")
    rec = lk.record_for(1234)
    assert rec.split()[0] == "bench" and f"host={HOST}" in rec and "pid=1234" in rec
