"""16 real processes fight over one lock dir; a shared counter and an enter/exit log prove
that no two holders ever overlap: 16 processes x 12 cycles through the library, 16 x 2
through `parity lock run` (each of its cycles is a parity process start: on a loaded 2-core
box 480 of them took longer than the old 600 s bound; the timeouts only catch a hang).  Every
waiter polls the lock: 30 and 3 cycles cost ~50 CPU-s of the suite for the same contention
(all 16 at once from the first cycle), so fewer cycles."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
REPO = TESTS.parent
FAKES = TESTS / "fakes" / "bin"
PROCS = 16

LIB_WORKER = r"""
import os, sys, time
from parity.config import load_profile
from parity.gpu.lock import GpuLock, holding
from parity.runners.local import LocalRunner
from parity.ui import Output
profile, lock_dir, work, cycles = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
prof = load_profile(profile)
out = Output(json_mode=True)
def rd(p):
    with open(p) as f: return f.read()
def wr(p, s):
    with open(p, "w") as f: f.write(s)
log = os.open(os.path.join(work, "log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
for i in range(cycles):
    tag = f"{os.getpid()}-{i}"
    lock = GpuLock(prof.lock, lock_dir, run_id=tag)
    with holding(lock, LocalRunner(), out, timeout=300):
        os.write(log, f"enter {tag}\n".encode())
        if f"run={tag}" not in rd(os.path.join(lock_dir, "owner")): os.write(log, f"WRONG-OWNER {tag}\n".encode())
        if rd(os.path.join(work, "inside")) != "0": os.write(log, f"OVERLAP {tag}\n".encode())
        wr(os.path.join(work, "inside"), "1")
        n = int(rd(os.path.join(work, "count")))
        time.sleep(0.001)
        wr(os.path.join(work, "count"), str(n + 1))
        if rd(os.path.join(work, "inside")) != "1": os.write(log, f"OVERLAP {tag}\n".encode())
        wr(os.path.join(work, "inside"), "0")
        os.write(log, f"exit {tag}\n".encode())
"""

# the same critical section in sh, run by `parity lock run`
SH_SECTION = r"""
tag="$1-$$"; w="$2"
echo "enter $tag" >> "$w/log"
[ "$(cat "$w/inside")" = 0 ] || echo "OVERLAP $tag" >> "$w/log"
echo 1 > "$w/inside"
n=$(cat "$w/count"); sleep 0.005; echo $((n + 1)) > "$w/count"
[ "$(cat "$w/inside")" = 1 ] || echo "OVERLAP $tag" >> "$w/log"
echo 0 > "$w/inside"
echo "exit $tag" >> "$w/log"
"""


def _prepare(tmp_path: Path) -> tuple[Path, Path]:
    work, lock_dir = tmp_path / "work", tmp_path / "gpu_bench_lock"
    work.mkdir()
    (work / "inside").write_text("0")
    (work / "count").write_text("0")
    return work, lock_dir


def _check(work: Path, lock_dir: Path, expected: int) -> None:
    lines = (work / "log").read_text().splitlines()
    bad = [ln for ln in lines if not ln.startswith(("enter ", "exit "))]
    assert not bad, bad[:5]
    assert len(lines) == 2 * expected
    for enter, exit_ in zip(lines[0::2], lines[1::2]):  # strictly alternating, same holder
        assert enter.startswith("enter ") and exit_ == "exit " + enter[len("enter ") :], (enter, exit_)
    assert int((work / "count").read_text()) == expected  # no lost update
    assert (lock_dir / "owner").read_text().startswith("FREE released-by-")
    assert sorted(p.name for p in lock_dir.iterdir()) == ["owner"]  # no temp files left


def _env(**extra) -> dict:
    env = dict(os.environ, PATH=f"{FAKES}{os.pathsep}{os.environ['PATH']}", PARITY_NO_NVML="1", **extra)
    env.pop("PARITY_GPU_LOCK", None)
    return env


def test_sixteen_library_processes(tmp_path):
    cycles = 12
    work, lock_dir = _prepare(tmp_path)
    profile = str(TESTS / "data" / "lock" / "fast-nopreflight.yaml")
    t0 = time.monotonic()
    procs = [
        subprocess.Popen([sys.executable, "-c", LIB_WORKER, profile, str(lock_dir), str(work), str(cycles)], cwd=REPO, env=_env(), stderr=subprocess.PIPE, text=True)
        for _ in range(PROCS)
    ]
    errs = [p.communicate(timeout=1800)[1] for p in procs]
    took = time.monotonic() - t0
    assert all(p.returncode == 0 for p in procs), [e[-500:] for e in errs if e]
    _check(work, lock_dir, PROCS * cycles)
    print(f"\nlock contention (library): {PROCS} processes x {cycles} cycles = {PROCS * cycles} holds in {took:.2f} s ({1000 * took / (PROCS * cycles):.1f} ms per hold, poll 0.01 s, 2 idle checks)")


def test_sixteen_parity_lock_run_processes(tmp_path):
    # 2 cycles each: every `parity lock run` pays a Python start-up, and the contention (16 at
    # once, each waiting on the others) is there from the first cycle; the many-cycle churn is
    # test_sixteen_library_processes' (12 cycles)
    cycles = 2
    work, lock_dir = _prepare(tmp_path)
    profile = str(TESTS / "data" / "lock" / "fast.yaml")  # full preflight with the fake tools (idle)
    loop = (
        f'for i in $(seq {cycles}); do "{sys.executable}" -m parity lock run --profile "{profile}" --lock-dir "{lock_dir}" --timeout 300 '
        f'-- sh -c \'{SH_SECTION}\' section "w$$" "{work}" || exit 1; done'
    )
    t0 = time.monotonic()
    procs = [
        subprocess.Popen(["sh", "-c", loop], cwd=REPO, env=_env(FAKE_NVIDIA_SMI="h100-idle", FAKE_DOCKER="none"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for _ in range(PROCS)
    ]
    errs = [p.communicate(timeout=1800)[1] for p in procs]
    took = time.monotonic() - t0
    assert all(p.returncode == 0 for p in procs), [e[-800:] for e in errs if e]
    _check(work, lock_dir, PROCS * cycles)
    print(f"\nlock contention (parity lock run): {PROCS} processes x {cycles} cycles = {PROCS * cycles} holds in {took:.2f} s (idle preflight via fake nvidia-smi + docker)")


# the holder's command ticks from a background subshell (a grandchild of parity: the
# parent-death signal reaches only the direct child) until it is killed with its holder
# (a `stop` file ends every ticker, so a failing run leaves nothing behind)
TICKER = 'echo "start $1" >> "$2/log"; (while [ ! -e "$2/stop" ]; do echo "tick $1" >> "$2/log"; sleep 0.01; done) & wait'


def _wait_line(log: Path, line: str, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and line in log.read_text().splitlines():
            return
        if proc.poll() is not None:
            raise AssertionError(f"holder exited {proc.returncode} before {line!r}: {proc.stderr.read()[-800:]}")
        time.sleep(0.02)
    raise AssertionError(f"no {line!r} within {timeout} s")


def test_sigkilled_holders_never_overlap_the_next(tmp_path):
    """20 times: kill -9 the `parity lock run` holder mid-command and start the next acquirer at
    once.  The next command may only start when everything the killed one started is gone:
    in the shared log, no `tick i` of a killed holder may follow `start i+1`."""
    iterations = 20
    work, lock_dir = _prepare(tmp_path)
    log = work / "log"
    profile = str(TESTS / "data" / "lock" / "fast-nopreflight.yaml")

    def holder(i: int, section: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "parity", "lock", "run", "--profile", profile, "--lock-dir", str(lock_dir), "--timeout", "300",
             "--", "sh", "-c", section, "section", str(i), str(work)],
            cwd=REPO, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    procs = [holder(0, TICKER)]
    try:
        prev = procs[0]
        _wait_line(log, "tick 0", prev)
        for i in range(1, iterations + 1):
            deadline = time.monotonic() + 60  # the holder records its command's group right after starting it
            while "pgids=" not in (lock_dir / "owner").read_text() and time.monotonic() < deadline:
                time.sleep(0.02)
            assert "pgids=" in (lock_dir / "owner").read_text()
            prev.send_signal(signal.SIGKILL)
            last = i == iterations
            nxt = holder(i, 'echo "start $1" >> "$2/log"; echo "end $1" >> "$2/log"' if last else TICKER)
            procs.append(nxt)
            prev.wait(30)
            if not last:
                _wait_line(log, f"tick {i}", nxt)
            prev = nxt
        _, err = prev.communicate(timeout=120)
        assert prev.returncode == 0, err
    finally:  # a failed run must not leave holders or tickers behind
        (work / "stop").write_text("")
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    lines = log.read_text().splitlines()
    started, overlaps = -1, []
    for n, line in enumerate(lines):
        kind, who = line.split()
        if kind == "start":
            assert int(who) == started + 1, (n, line)
            started = int(who)
        elif int(who) != started:
            overlaps.append((n, line, f"after start {started}"))
    assert [ln for ln in lines if ln.startswith("start ")] == [f"start {i}" for i in range(iterations + 1)]
    assert overlaps == [], overlaps[:5]
    assert lines[-1] == f"end {iterations}" and (lock_dir / "owner").read_text().startswith("FREE released-by-")
    print(f"\nlock SIGKILL contention: {iterations} holders killed mid-command, 0 overlaps in {len(lines)} stamped lines")
