"""What a synthesized model is: a tiny GGUF (SynthSpec) or a tiny Hugging Face checkpoint and its GGUF twin (HfModelSpec)."""

from __future__ import annotations

from typing import Literal

import msgspec

from parity.errors import ConfigError


class SynthSpec(msgspec.Struct):
    arch: str = "llama"
    dtype: Literal["f32", "f16"] = "f32"
    seed: int = 0
    layers: int = 2
    embd: int = 64
    heads: int = 4
    kv_heads: int = 2
    ff: int = 128
    ctx: int = 512
    experts: int = 0
    experts_used: int = 0
    noise: float = 0.0  # perturbation scale on top of `seed` weights (KL variants)
    perturb_seed: int = 0


class HfShape(msgspec.Struct, frozen=True):
    """The shape of a tiny Hugging Face llama checkpoint (parity.models.hf_tiny)."""

    seed: int = 0
    layers: int = 2
    hidden: int = 256
    heads: int = 4
    kv_heads: int = 2
    ff: int = 512
    ctx: int = 2048


class HfModelSpec(HfShape, frozen=True):
    """A tiny deterministic HF llama checkpoint written at models.X.vllm_path and converted to
    models.X.path by `source`'s convert_hf_to_gguf.py: the same weights for vLLM and llama.cpp."""

    source: str | None = None  # the llama.cpp source whose converter makes the GGUF; None: the first llama engine's
    outtype: Literal["f32", "f16"] = "f32"


def check_model(m, label: str, key: str, sources) -> None:
    """models.NAME (config.ModelConfig): a GGUF path or a synth: spec; hf: with its checkpoint
    directory and a source among `sources` (the profile's source names)."""
    if not m.path and m.synth is None:
        raise ConfigError(label, f"{key}.path", "missing (give a GGUF path or a synth: spec)")
    if m.hf is None:
        return
    if m.synth is not None:
        raise ConfigError(label, key, "give synth: or hf:, not both")
    if not m.vllm_path:
        raise ConfigError(label, f"{key}.vllm_path", "an hf: model needs the directory its checkpoint is written to")
    if m.hf.source is not None and m.hf.source not in sources:
        known = ", ".join(sources) or "none"
        raise ConfigError(label, f"{key}.hf.source", f"unknown source {m.hf.source!r} (known: {known})")
