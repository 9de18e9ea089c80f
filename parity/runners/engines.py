"""Engine adapters: how to start, reach and name a serving engine.

Registered by name in ADAPTERS (engine.kind in the profile).  Lifecycle is
written once in parity.runners.server."""

from __future__ import annotations

import os
from dataclasses import dataclass

from parity.errors import UsageError

# parity's own knobs that must never leak into `vllm serve`'s environment (Phase 49)
VLLM_HARNESS_VARS = (
    "VLLM_MODEL",
    "VLLM_BIN",
    "VLLM_READY_ATTEMPTS",
    "VLLM_GPU_MEMORY_UTILIZATION",
    "VLLM_MAX_MODEL_LEN",
    "VLLM_MAX_NUM_SEQS",
    "VLLM_TENSOR_PARALLEL_SIZE",
    "VLLM_EXTRA_ARGS",
)


@dataclass
class Launch:
    argv: list[str]
    env: dict[str, str]
    unset: list[str]
    ready_path: str
    served_name: str
    tokenize: str  # /tokenize dialect for the load generator


class LlamaServer:
    kind = "llama"

    def launch(self, ctx, engine: str, model_file: str, port: int, s, path: str | None = None) -> Launch:
        from parity.engine.build import tool_path
        from parity.gates.run import path_env

        e = ctx.profile.engine(engine)
        binary = tool_path(ctx.profile, engine, "llama-server", ctx.runner, ctx.out)
        argv = [binary, "-m", model_file, "-c", str(s.ctx), "--parallel", str(s.parallel), "-b", str(s.batch), "-ub", str(s.ubatch)]
        argv += [*s.server_args, *e.server_args, "--host", "127.0.0.1", "--port", str(port), "--no-webui"]
        return Launch(argv, path_env(ctx, engine, path), [], "/health", os.path.basename(model_file), "llama")


class VllmServer:
    kind = "vllm"

    def launch(self, ctx, engine: str, model_file: str, port: int, s, path: str | None = None) -> Launch:
        e = ctx.profile.engine(engine)
        name = served_name(ctx, engine)
        argv = [
            os.path.expanduser(e.vllm_bin),
            "serve",
            model_file,
            "--gpu-memory-utilization",
            str(e.gpu_memory_utilization),
            "--max-model-len",
            str(e.max_model_len),
            "--max-num-seqs",
            str(e.max_num_seqs),
            "--tensor-parallel-size",
            str(e.tensor_parallel_size),
            "--served-model-name",
            name,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *e.extra_args,
        ]
        return Launch(argv, dict(e.env), list(VLLM_HARNESS_VARS), "/health", name, "vllm")


ADAPTERS = {"llama": LlamaServer(), "vllm": VllmServer()}


def adapter(ctx, engine: str):
    kind = ctx.profile.engine(engine).kind
    if kind not in ADAPTERS:
        raise UsageError(f"engine {engine}: no adapter for kind {kind!r}")
    return ADAPTERS[kind]


def served_name(ctx, engine: str) -> str:
    m = ctx.profile.models.get(ctx.profile.serving.model)
    return (m.served_name if m and m.served_name else ctx.profile.serving.model) or engine


def model_for(ctx, engine: str, model: str) -> str:
    """The model file/dir this engine serves: vLLM takes models.X.vllm_path."""
    from parity.gates.run import resolve_model

    e = ctx.profile.engine(engine)
    if e.kind == "vllm":
        m = ctx.profile.models.get(model)
        if m and m.vllm_path:
            return m.vllm_path
    return resolve_model(ctx, model)[1]
