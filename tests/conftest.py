"""Shared fixtures.  Heavy ones (real llama.cpp builds, synthesized models) are
session-scoped and cached under ~/.cache/parity, so CI builds once per machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"


def run_parity(*args: str, env: dict | None = None, cwd: str | Path | None = None, timeout: float = 600, input: str | None = None):
    """Run the real CLI in a subprocess; returns CompletedProcess (text)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "parity", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=cwd or REPO,
        timeout=timeout,
        input=input,
        stdin=None if input is not None else subprocess.DEVNULL,
    )


@pytest.fixture
def parity_cli():
    return run_parity


@pytest.fixture(scope="session")
def smoke_profile():
    from parity.config import load_profile

    return load_profile("smoke")


@pytest.fixture(scope="session")
def tiny_model(smoke_profile) -> Path:
    """The smoke profile's `tiny` GGUF, synthesized on first use."""
    from parity.models.synth import ensure_model

    return Path(ensure_model(smoke_profile, "tiny"))


@pytest.fixture(scope="session")
def engine_bins(smoke_profile) -> dict[str, Path]:
    """Real CPU builds of the smoke engines (paged = demo series, stock), cached."""
    from parity.engine.build import ensure_built
    from parity.runners.local import LocalRunner
    from parity.ui import Output

    out = Output(json_mode=True)
    return {name: Path(ensure_built(smoke_profile, name, LocalRunner(), out).bin_dir) for name in ("paged", "stock")}
