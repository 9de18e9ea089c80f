"""Shared helpers for the gate integration tests (not a test module)."""

from __future__ import annotations

from pathlib import Path

from parity.artifacts import RunDir
from parity.config import load_profile
from parity.context import Context
from parity.gates.base import gate_inputs
from parity.runners.local import LocalRunner
from parity.ui import Output


def make_ctx(tmp_path: Path, profile="smoke") -> Context:
    prof = load_profile(str(profile))
    if prof.lock.dir == load_profile("smoke").lock.dir:  # gates take the GPU lock: never the machine's own in tests
        prof.lock.dir = str(tmp_path / "gpu_bench_lock")
    ctx = Context(prof, LocalRunner(), Output(json_mode=True), tmp_path / "runs")
    ctx.run = RunDir.create(tmp_path / "runs", "gate-test", argv=["pytest"], config=None, kind="test")
    return ctx


def values(ctx: Context) -> tuple:
    """(the gate inputs, the run): what the gate check functions take, from a test's context."""
    return gate_inputs(ctx.profile), ctx.as_run()


def write_profile(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
