"""A cold build never holds the GPU lock: every compile happens before the lock is taken.
The engines build tests/data/build/mini-llama with the real cmake, through a cmake shim on
PATH that records, for each configure/build, what the lock's owner file said at that moment."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
FAKES = REPO / "tests" / "fakes" / "bin"
REAL_CMAKE = shutil.which("cmake")


@pytest.fixture
def recorded(tmp_path, mini_build, monkeypatch):
    """(profile path, record file, lock dir): mini engines, a fast lock in tmp, the cmake shim first on PATH."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "cmake").write_text(f'#!/bin/sh\ncase "$1" in -S|--build) echo "$1 $(cat "$LOCK_OWNER" 2>/dev/null || echo no-owner-file)" >> "$CMAKE_RECORD" ;; esac\nexec {REAL_CMAKE} "$@"\n')
    (shim / "cmake").chmod(0o755)
    lock_dir = tmp_path / "gpu_bench_lock"
    targets = ["llama-completion", "test-backend-ops", "llama-batched-bench"]
    prof = Path(mini_build(engines={"paged": {"source": "mini", "targets": targets}}))
    doc = yaml.safe_load(prof.read_text())
    doc["lock"] = {"dir": str(lock_dir), "poll_s": 0.05, "timeout_s": 60, "idle_checks": 1, "preflight": False}
    doc["gates"] = {"engine": "paged", "ops": ["RMS_NORM"], "op_backend": "CPU"}
    doc["profiling"] = {"ntg": [4, 2], "npl": 1, "npp": 16, "blocks": 1}  # one block: the order of build and lock is the point here
    prof.write_text(yaml.safe_dump(doc))
    record = tmp_path / "cmake-record.txt"
    monkeypatch.setenv("PATH", f"{shim}{os.pathsep}{FAKES}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CMAKE_RECORD", str(record))
    monkeypatch.setenv("LOCK_OWNER", str(lock_dir / "owner"))
    monkeypatch.setenv("PARITY_NO_NVML", "1")
    monkeypatch.delenv("PARITY_GPU_LOCK", raising=False)
    return prof, record, lock_dir


def parity(*args, cwd, timeout=600):
    return subprocess.run([sys.executable, "-m", "parity", *args], capture_output=True, text=True, cwd=cwd, timeout=timeout, stdin=subprocess.DEVNULL)


def compiles(record: Path) -> list[str]:
    return record.read_text().splitlines() if record.exists() else []


@pytest.mark.skipif(REAL_CMAKE is None, reason="needs cmake")
def test_campaign_builds_before_its_lock_step(recorded, tmp_path):
    """lock, then a gate step whose engine is not built: the build runs before the lock is taken."""
    prof, record, lock_dir = recorded
    camp = tmp_path / "camp.yaml"
    camp.write_text("name: order\nsteps:\n  - {name: lock, kind: lock}\n  - {name: gates, kind: gate, with: {phase: pre}}\n")
    r = parity("--artifacts", str(tmp_path / "runs"), "campaign", "run", str(camp), "-p", str(prof), "--json", cwd=REPO)
    lines = compiles(record)
    assert [ln.split()[0] for ln in lines] == ["-S", "--build"], r.stderr[-2000:]  # one configure, one build: a cold build
    assert all(ln.split(" ", 1)[1] == "no-owner-file" for ln in lines), lines  # nobody held the lock while it compiled
    (run,) = (tmp_path / "runs").iterdir()
    assert json.loads((run / "lock.json").read_text())["owner"]  # ... and the lock was taken afterwards
    assert (lock_dir / "owner").read_text().startswith("FREE")
    assert "[build] before the GPU lock: paged" in r.stderr and "while this parity holds the GPU lock" not in r.stderr


@pytest.mark.skipif(REAL_CMAKE is None, reason="needs cmake")
def test_profile_builds_before_its_lock(recorded, tmp_path):
    prof, record, lock_dir = recorded
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    r = parity("--artifacts", str(tmp_path / "runs"), "profile", "--graph-node", "--engine", "paged", "--model", str(model), "-p", str(prof), "--json", cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = compiles(record)
    assert [ln.split()[0] for ln in lines] == ["-S", "--build"] and all(ln.endswith("no-owner-file") for ln in lines), lines
    run = Path(json.loads(r.stdout)["run_dir"])
    assert json.loads((run / "lock.json").read_text())["owner"] and (lock_dir / "owner").read_text().startswith("FREE")


def test_a_build_under_the_lock_is_refused(mini_build, tmp_path):
    """A caller that would build while holding the lock is refused, naming the lock; the same
    build prepared before the lock is a cache hit under it."""
    from parity import session
    from parity.config import load_profile
    from parity.context import Context
    from parity.gpu.lock import GpuLock, PreparedUnderLock, held_here, holding
    from parity.runners.local import LocalRunner
    from parity.ui import Output

    prof = load_profile(str(mini_build()))
    prof.lock.preflight = False
    prof.lock.idle_checks, prof.lock.poll_s = 1, 0.1  # no waiting between idle checks: nobody else is here
    ctx = Context(profile=prof, runner=LocalRunner(), out=Output(json_mode=True), artifacts_root=tmp_path)
    lock = GpuLock(prof.lock, str(tmp_path / "lk"))
    assert held_here() is None
    with holding(lock, ctx.runner, ctx.out, timeout=30):
        assert held_here() == str(lock.dir)
        with pytest.raises(PreparedUnderLock, match=f"the build of paged started while this parity holds the GPU lock {lock.dir}"):
            session.prepare(ctx, ["paged", "paged"])
    assert held_here() is None
    built = session.prepare(ctx, ["paged", "paged"])
    assert list(built) == ["paged"] and built["paged"]["cached"] is False
    with holding(lock, ctx.runner, ctx.out, timeout=30):
        assert session.prepare(ctx, ["paged"])["paged"]["cached"] is True
