"""Gates put work on the GPU, so they hold the GPU lock (issue 17, case 3): `parity gate`
and a campaign gate step wait for a live owner and give up with exit 4 after lock.timeout_s
without running a single check; with the lock free they take it and release it."""

from __future__ import annotations

import hashlib
import json
import socket
import stat
import subprocess
import time
from pathlib import Path

import pytest
from gate_helpers import make_ctx, write_profile

from parity.errors import InfraError
from parity.gating import campaign_step

DATA = Path(__file__).resolve().parents[1] / "data" / "gates"
TRANSCRIPT = DATA / "completion-no-cnv.stdout"


def _profile(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(profile, lock dir, marker): the fake llama-completion replays a real transcript and
    leaves the marker behind, so a test sees whether any gate work ran."""
    bin_dir, marker, lock_dir = tmp_path / "bin", tmp_path / "completion-ran", tmp_path / "gpu_bench_lock"
    bin_dir.mkdir()
    tool = bin_dir / "llama-completion"
    tool.write_text(f"#!/bin/sh\ntouch {marker}\ncat {TRANSCRIPT}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF fake model")
    md5 = hashlib.md5(TRANSCRIPT.read_bytes()).hexdigest()
    prof = write_profile(
        tmp_path / "gate-lock.yaml",
        f"""extends: smoke
models:
  m: {{path: {model}, canonical: [{{md5: {md5}, path: paged, form: no-cnv}}]}}
engines:
  fake: {{kind: llama, bin_dir: {bin_dir}, paths: {{paged: {{}}}}, default_path: paged}}
gates: {{engine: fake, reference_engine: null, models: [m], paths: [paged], ops: [], completion_retries: 1}}
lock: {{dir: {lock_dir}, poll_s: 0.2, timeout_s: 2, preflight: false}}
""",
    )
    return prof, lock_dir, marker


@pytest.fixture
def live_owner(tmp_path):
    """A live process on this host owns the lock (the record the users' scripts write, plus pid=)."""
    holder = subprocess.Popen(["sleep", "600"])
    lock_dir = tmp_path / "gpu_bench_lock"
    lock_dir.mkdir()
    (lock_dir / "owner").write_text(f"bench@{socket.gethostname()} {int(time.time())} pid={holder.pid}\n")
    yield holder
    holder.kill()
    holder.wait()


def test_parity_gate_waits_for_a_live_owner_and_runs_nothing(tmp_path, parity_cli, live_owner):
    prof, lock_dir, marker = _profile(tmp_path)
    res = parity_cli("--artifacts", str(tmp_path / "runs"), "gate", "--profile", str(prof))
    assert res.returncode == 4, res.stderr
    assert "GPU lock" in res.stderr and f"pid {live_owner.pid}" in res.stderr and "Traceback" not in res.stderr
    assert not marker.exists()  # no gate work ran on a GPU someone else holds
    assert (lock_dir / "owner").read_text().startswith("bench@")  # the owner's record untouched


def test_parity_gate_holds_the_lock_while_it_runs(tmp_path, parity_cli):
    prof, lock_dir, marker = _profile(tmp_path)
    res = parity_cli("--artifacts", str(tmp_path / "runs"), "gate", "--profile", str(prof), "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["green"] is True and marker.exists()
    (run,) = (tmp_path / "runs").iterdir()
    held = json.loads((run / "lock.json").read_text())
    assert held["dir"] == str(lock_dir) and f"run={run.name}" in held["owner"]
    assert (lock_dir / "owner").read_text().startswith("FREE released-by-")


def test_campaign_gate_step_takes_the_lock(tmp_path, live_owner):
    prof, _, marker = _profile(tmp_path)
    ctx = make_ctx(tmp_path, prof)
    with pytest.raises(InfraError, match="not acquired within"):
        campaign_step(ctx, {"phase": "pre"})
    assert not marker.exists()


@pytest.mark.parametrize("argv", [["hw", "--json"], ["config", "show", "--json"], ["lock", "status", "--json"]])
def test_read_only_commands_do_not_take_the_lock(tmp_path, parity_cli, live_owner, argv):
    """A live owner holds the lock (lock.timeout_s 2): a read-only command neither waits nor fails."""
    prof, lock_dir, _ = _profile(tmp_path)
    res = parity_cli(*argv, "--profile", str(prof), env={"PARITY_NO_NVML": "1"})
    assert res.returncode == 0, res.stderr
    assert (lock_dir / "owner").read_text().startswith("bench@")
