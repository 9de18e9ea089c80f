"""Engine adapters: how to start, reach and name a serving engine.

An adapter turns (profile engine, model, port, serving shape) into a Launch:
argv, env overrides, names to unset, readiness URL, served model name, the
/tokenize dialect and the metrics endpoint to scrape.  Adapters register by
name (engine.kind) in ADAPTERS; the lifecycle (port check, spawn, ready, stop)
is written once in parity.serving.server."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from parity.errors import ConfigError, UsageError

# parity's own knobs: the old harness exported these, and `vllm serve` warns
# about every unknown VLLM_* variable it inherits (Phase 49).  They are unset in
# the child; real vLLM runtime variables (VLLM_LOGGING_LEVEL, ...) pass through.
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
    env: dict[str, str]  # overrides on top of the inherited environment
    unset: list[str]  # inherited names removed from the child's environment
    ready_path: str
    served_name: str
    tokenize: str  # /tokenize dialect for the load generator ("llama" | "vllm")
    models_path: str | None = None  # GET it once ready: the served name must be listed
    metrics_path: str | None = None  # scraped around each point (Prometheus text)
    engine: str = ""
    kind: str = ""
    notes: list[str] = field(default_factory=list)
    count: str = "chunks"  # how its stream says tokens per chunk (parity.serving.loadgen.COUNTERS)
    request_extra: dict = field(default_factory=dict)  # fields added to every completion request
    props_path: str | None = None  # llama-server /props: the context each slot really has
    probe_extra: dict = field(default_factory=dict)  # fields the output-parity probe adds (vLLM: token ids as logprob keys)


def _llama_binary(ctx, engine: str, dry: bool) -> str:
    from parity.engine import build

    find = build.dry_tool_path if dry else build.tool_path
    return find(ctx.profile, engine, "llama-server", ctx.runner, ctx.out)


class LlamaServer:
    kind = "llama"

    def env(self, ctx, engine: str, path: str | None = None) -> dict[str, str]:
        """The engine's env plus its path's (e.g. LLAMA_KV_PAGED=1 for the paged path)."""
        from parity.gates.run import path_env

        return path_env(ctx, engine, path)

    def launch(self, ctx, engine: str, model_file: str, port: int, s, path: str | None = None, dry: bool = False, model: str | None = None) -> Launch:
        e = ctx.profile.engine(engine)
        argv = [_llama_binary(ctx, engine, dry), "-m", model_file, "-c", str(s.ctx), "--parallel", str(s.parallel), "-b", str(s.batch), "-ub", str(s.ubatch)]
        argv += [*s.server_args, *e.server_args, "--host", "127.0.0.1", "--port", str(port), "--no-webui", "--metrics"]
        return Launch(argv, self.env(ctx, engine, path), [], "/health", os.path.basename(model_file), "llama", metrics_path="/metrics", engine=engine, kind=self.kind,
                      count="timings", request_extra={"timings_per_token": True}, props_path="/props")  # fmt: skip

    def context_need(self, ctx, engine: str, s, model_file: str | None = None) -> tuple[int, str]:
        """(tokens one request may use, what limits it): -c is split across --parallel slots, and
        llama-server caps a slot at the model's training context."""
        per_slot = s.ctx // s.parallel
        train = gguf_context_length(model_file) if model_file else None
        if train and train < per_slot:
            return train, f"the model's training context ({train}; llama-server caps each slot there, -c {s.ctx} / --parallel {s.parallel} would give {per_slot})"
        return per_slot, f"-c {s.ctx} / --parallel {s.parallel} (raise serving.ctx / --ctx, or lower --parallel)"


class VllmServer:
    kind = "vllm"

    def env(self, ctx, engine: str, path: str | None = None) -> dict[str, str]:
        """As the users start it: HF_HUB_OFFLINE=1 (a served directory, no hub lookups) and the
        vLLM binary's own bin directory first on PATH (its venv's tools), then the profile's env."""
        e = ctx.profile.engine(engine)
        env = {"HF_HUB_OFFLINE": "1"}
        binary = vllm_binary(e, dry=True)
        if os.sep in binary:
            env["PATH"] = os.path.dirname(os.path.abspath(binary)) + os.pathsep + os.environ.get("PATH", "")
        env.update(e.env)
        return env

    def context_need(self, ctx, engine: str, s, model_file: str | None = None) -> tuple[int, str]:
        e = ctx.profile.engine(engine)
        return e.max_model_len, f"engines.{engine}.max_model_len {e.max_model_len} (vLLM clamps max_tokens silently past it)"

    def launch(self, ctx, engine: str, model_file: str, port: int, s, path: str | None = None, dry: bool = False, model: str | None = None) -> Launch:
        e = ctx.profile.engine(engine)
        leaked = sorted(set(e.env) & set(VLLM_HARNESS_VARS))
        if leaked:
            key = leaked[0][len("VLLM_"):].lower()
            raise ConfigError(ctx.profile.source_file, f"engines.{engine}.env.{leaked[0]}", f"a parity setting, not a vLLM variable: set engines.{engine}.{key} instead")
        name = served_name(ctx, engine, model)
        argv = [
            vllm_binary(e, dry, ctx.out),
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
            *(["--dtype", e.dtype] if e.dtype else []),
            *e.extra_args,
        ]
        extra = {"stream_options": {"include_usage": True, "continuous_usage_stats": True}}
        return Launch(argv, self.env(ctx, engine), list(VLLM_HARNESS_VARS), "/health", name, "vllm", "/v1/models", "/metrics", engine=engine, kind=self.kind,
                      count="usage", request_extra=extra, probe_extra={"return_tokens_as_token_ids": True})  # fmt: skip


def vllm_binary(e, dry: bool = False, out=None) -> str:
    """engines.X.vllm_bin, or with `auto` the cached CPU venv's (installed on first real use)."""
    if e.vllm_bin != "auto":
        return os.path.expanduser(e.vllm_bin)
    from parity.serving import vllm_install

    return str(vllm_install.venv().vllm if dry else vllm_install.ensure_vllm(out))


ADAPTERS = {"llama": LlamaServer(), "vllm": VllmServer()}


def gguf_context_length(path: str) -> int | None:
    """<arch>.context_length from a GGUF's header (None when it is not a readable GGUF)."""
    from parity.models.gguf_header import GGUFHeaderError, read_header

    try:
        fields = read_header(path).fields
    except (OSError, GGUFHeaderError):  # a missing or foreign file: the run-time /props check still holds
        return None
    n = fields.get(f"{fields.get('general.architecture')}.context_length")
    return int(n) if isinstance(n, int) and not isinstance(n, bool) else None


def adapter(ctx, engine: str):
    kind = ctx.profile.engine(engine).kind
    if kind not in ADAPTERS:
        raise UsageError(f"engine {engine}: no adapter for kind {kind!r} (known: {', '.join(ADAPTERS)})")
    return ADAPTERS[kind]


def served_name(ctx, engine: str, model: str | None = None) -> str:
    model = model or ctx.profile.serving.model
    m = ctx.profile.models.get(model)
    return (m.served_name if m and m.served_name else model) or engine


def model_for(ctx, engine: str, model: str, dry: bool = False) -> str:
    """The model file/dir this engine serves: vLLM takes models.X.vllm_path (else the path as given)."""
    e = ctx.profile.engine(engine)
    if e.kind == "vllm":
        m = ctx.profile.models.get(model)
        if m is None:
            return os.path.expanduser(model)
        if m.hf is not None and not dry:
            from parity.models.synth import ensure_model

            ensure_model(ctx.profile, model)  # the checkpoint vLLM serves (and its GGUF twin)
        return os.path.expanduser(m.vllm_path or m.path)
    m = ctx.profile.models.get(model)
    if dry and m is not None and m.hf is not None:
        return m.path  # made on the first real run (it needs the vLLM venv)
    from parity.gates.run import resolve_model

    return resolve_model(ctx, model)[1]
