"""Run directories: manifest provenance, atomic writes, end states."""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path

import pytest

from parity.artifacts import RunDir, redact_env, slugify

from parity.files import atomic_write_bytes, atomic_write_json
from parity.config import load_profile
from parity.context import Context, run_session
from parity.errors import GateFailed, UsageError
from parity.runners.local import LocalRunner
from parity.ui import Output


def test_create_writes_provenance(tmp_path):
    rd = RunDir.create(tmp_path, "Snapshot: small/N=4", argv=["parity", "snapshot"], config=load_profile("smoke"), kind="snapshot", env={"HOME": "/h", "HF_TOKEN": "s3cret"})
    m = rd.manifest()
    assert rd.path.parent == tmp_path and rd.path.name.endswith("_snapshot-small-n-4")
    assert m["run_id"] == rd.path.name and m["status"] == "running" and m["valid"] is True
    assert m["argv"] == ["parity", "snapshot"] and m["kind"] == "snapshot" and m["pid"] == os.getpid()
    assert m["config"]["name"] == "smoke" and m["config"]["models"]["tiny"]["synth"]["dtype"] == "f16"
    assert m["env"] == {"HF_TOKEN": "<redacted>", "HOME": "/h"}
    assert m["started"] and m["ended"] is None


def test_same_second_same_slug_gets_a_suffix(tmp_path):
    a = RunDir.create(tmp_path, "x", argv=[], env={})
    b = RunDir.create(tmp_path, "x", argv=[], env={})
    assert a.path != b.path
    if a.path.name[:15] == b.path.name[:15]:  # same YYYYMMDD_HHMMSS stamp
        assert b.path.name == a.path.name + "-2"


def test_finish_steps_and_invalid(tmp_path):
    rd = RunDir.create(tmp_path, "x", argv=[], env={})
    rd.record_step("build", "running", kind="build")
    rd.record_step("build", "complete", seconds=1.5)
    rd.mark_invalid("post-gate red")
    rd.finish("failed", "boom")
    m = rd.manifest()
    assert m["steps"]["build"]["status"] == "complete" and m["steps"]["build"]["kind"] == "build"
    assert rd.step_status("build") == "complete" and rd.step_status("nope") is None
    assert m["valid"] is False and m["invalid_reasons"] == ["post-gate red"]
    assert m["status"] == "failed" and m["error"] == "boom" and m["ended"]
    with pytest.raises(AssertionError):
        rd.finish("exploded")
    cut = RunDir.create(tmp_path, "y", argv=[], env={})
    cut.record_step("a", "complete")
    cut.record_step("b", "running")
    cut.finish("interrupted", "SIGTERM")
    assert cut.step_status("a") == "complete" and cut.step_status("b") == "interrupted"


def test_open_refuses_a_non_run_dir(tmp_path):
    with pytest.raises(UsageError, match="not a parity run directory"):
        RunDir.open(tmp_path)


def test_atomic_write_leaves_old_content_and_no_temp_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "out.json"
    atomic_write_json(target, {"v": 1})

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        atomic_write_bytes(target, b"partial")
    monkeypatch.undo()
    assert json.loads(target.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_redact_and_slugify():
    assert redact_env({"A_KEY": "x", "PASSWORD": "y", "PATH": "/bin"}) == {"A_KEY": "<redacted>", "PASSWORD": "<redacted>", "PATH": "/bin"}
    assert slugify("  GB10 / Qwen3.6 : N=128 ") == "gb10-qwen3-6-n-128"
    assert slugify("!!!") == "run"


def _ctx(tmp_path) -> Context:
    return Context(profile=load_profile("smoke"), runner=LocalRunner(), out=Output(json_mode=True), artifacts_root=tmp_path)


@pytest.mark.parametrize(
    "exc, status",
    [(None, "complete"), (GateFailed("post-gate red"), "failed"), (KeyboardInterrupt(), "interrupted"), (RuntimeError("bug"), "failed")],
)
def test_run_session_end_states_and_cleanup_first(tmp_path, exc, status):
    ctx = _ctx(tmp_path)
    order = []

    @contextmanager
    def lock():
        try:
            yield
        finally:
            order.append(("released", ctx.run.manifest()["status"]))

    try:
        with run_session(ctx, "test", "t", argv=["x"]) as rd:
            ctx.cleanup.enter_context(lock())
            if exc is not None:
                raise exc
    except BaseException as e:
        assert e is exc
    m = rd.manifest()
    assert m["status"] == status
    assert order == [("released", "running")]  # the lock is released before the run is closed
    if isinstance(exc, GateFailed):
        assert m["error"] == "post-gate red"


def test_run_session_stops_spawned_processes_on_interrupt(tmp_path):
    ctx = _ctx(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        with run_session(ctx, "test", "t", argv=["x"]):
            proc = ctx.runner.spawn(["sleep", "300"])
            raise KeyboardInterrupt
    assert proc.poll() is not None
    assert not Path(f"/proc/{proc.pid}").exists() or "Z" in Path(f"/proc/{proc.pid}/stat").read_text().split(")")[1][:3]
