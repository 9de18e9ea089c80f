"""go_no_go's verdicts one by one: ports, build placeholders, the exit-code rule, the users' preflight.txt."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from parity.config import load_profile
from parity.context import Context, Run
from parity.errors import InfraError, UsageError
from parity.gonogo import go_no_go, raise_if_no_go, users_preflight_txt
from parity.runners.local import LocalRunner
from parity.ui import Output

FAKES = Path(__file__).resolve().parents[1] / "fakes" / "bin"


@pytest.fixture
def ctx(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PARITY_NO_NVML", "1")
    monkeypatch.setenv("FAKE_NVIDIA_SMI", "h100-idle")
    monkeypatch.setenv("FAKE_DOCKER", "none")
    monkeypatch.delenv("PARITY_GPU_LOCK", raising=False)
    prof = load_profile("smoke")
    prof.lock.dir = str(tmp_path / "lk")
    return Context(profile=prof, runner=LocalRunner(), out=Output(json_mode=True), artifacts_root=tmp_path)


def check(ctx, **kw) -> dict:
    """go_no_go with no run directory (nothing written)."""
    return go_no_go(Run(None, ctx.out, ctx.runner), ctx.profile.lock, ctx.profile.hardware_class, **kw)


def test_idle_is_go(ctx):
    doc = check(ctx, paths={"model": __file__, "llama-server of paged": "<llama-server of paged: built on the first real run>"})
    assert doc["go"] and doc["exit_code"] == 0 and doc["paths"]["model"]["ok"] and doc["hardware_class"] == "hopper"
    raise_if_no_go(doc)  # no exception


def test_a_taken_port_is_no_go_4(ctx):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        doc = check(ctx, ports=[port])
    assert (doc["go"], doc["exit_code"], doc["ports"]) == (False, 4, {port: False})
    with pytest.raises(InfraError, match=f"NO GO: port {port} is in use"):
        raise_if_no_go(doc)


def test_a_source_missing_here_is_no_go_but_a_build_to_come_is_not(ctx):
    doc = check(ctx, paths={"llama-server of paged": "<llama-server of paged: source ~/LocalAI/backend/cpp/llama-cpp-localai-paged not found>"})
    assert doc["exit_code"] == 2 and doc["reasons"] == [{"kind": "path", "what": "llama-server of paged: source ~/LocalAI/backend/cpp/llama-cpp-localai-paged not found"}]


def test_missing_path_outranks_busy_gpu(ctx, monkeypatch):
    """Both at once: exit 2 (fix the config first; waiting for the GPU would not help)."""
    monkeypatch.setenv("FAKE_NVIDIA_SMI", "h100-busy")
    doc = check(ctx, paths={"model gone": "/nonexistent.gguf"})
    assert doc["exit_code"] == 2 and [r["kind"] for r in doc["reasons"]] == ["gpu", "path"]
    with pytest.raises(UsageError, match="NO GO: GPU busy: .*437 ./busy_app; model gone: /nonexistent.gguf does not exist"):
        raise_if_no_go(doc)


def test_no_gpu_step_checks_neither_lock_nor_gpu(ctx, monkeypatch, tmp_path):
    monkeypatch.setenv("FAKE_NVIDIA_SMI", "h100-busy")
    (tmp_path / "lk").mkdir()  # a legacy empty-dir lock: held
    assert check(ctx, gpu=False)["go"] is True
    assert check(ctx)["exit_code"] == 4


def test_users_preflight_txt_shape():
    pf = {"detail": {"docker": {"containers": ["local-ai-worker-1", "srv_redis_1"]}, "gpu": {"apps": [{"pid": 437}]}}}
    assert users_preflight_txt(pf, "mudler 1767300000\n") == "docker=2\nlocal_ai_worker=1\ncompute=1\nmudler 1767300000\n"
    assert users_preflight_txt(None, None) == "docker=0\nlocal_ai_worker=0\ncompute=0\nFREE-no-lock-file\n"


def test_command_paths_from_snapshot_dry_run_commands(ctx, tmp_path):
    from parity.gonogo import command_paths

    cmds = [
        {"engine": "paged", "argv": ["<llama-server of paged: built on the first real run>", "-m", "x"], "model_error": None},
        {"engine": "vllm", "argv": ["vllm-not-installed-here", "serve", "/m"], "model_error": "model moe: /nonexistent.gguf does not exist"},
        {"engine": "stock", "error": "engine stock: no such path 'paged'"},
    ]
    paths = command_paths(ctx.runner, cmds)
    assert paths == {
        "server of paged": "<llama-server of paged: built on the first real run>",
        "vllm-not-installed-here of vllm": "<vllm-not-installed-here of vllm: not on PATH>",
        "model of vllm": "<model of vllm: model moe: /nonexistent.gguf does not exist>",
        "command of stock": "<stock: engine stock: no such path 'paged'>",
    }
    doc = check(ctx, paths=paths)
    assert doc["exit_code"] == 2 and [r["what"] for r in doc["reasons"]] == [
        "vllm-not-installed-here of vllm: not on PATH", "model of vllm: model moe: /nonexistent.gguf does not exist", "stock: engine stock: no such path 'paged'"]
