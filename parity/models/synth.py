"""Deterministic tiny GGUF models (llama arch, byte-level BPE vocab, random weights).

Same SynthSpec -> byte-identical file.  `noise`/`perturb_seed` add relative
Gaussian noise to every weight: the same model, slightly lossy, for KL gates.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict
from pathlib import Path

from parity.artifacts import sha256_file
from parity.config import Profile, SynthSpec
from parity.errors import ConfigError, UsageError

# printable ASCII plus tab/newline/CR, in GPT-2's byte->unicode spelling
_BYTES = [9, 10, 13] + list(range(32, 127))
_MERGES = [("Ġ", "t"), ("h", "e"), ("Ġ", "a"), ("i", "n"), ("e", "r"), ("Ġt", "he"), ("o", "n"), ("Ġ", "s"), ("r", "e"), ("a", "t")]
_SPECIALS = ["<|bos|>", "<|im_start|>", "<|im_end|>"]
# ChatML: a template llama.cpp recognises without --jinja, so the chat-form gate works
CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _gpt2_byte_char(b: int) -> str:
    """GPT-2's reversible byte -> printable unicode char mapping."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    if b in printable:
        return chr(b)
    n = 0
    for c in range(256):
        if c not in printable:
            if c == b:
                return chr(256 + n)
            n += 1
    raise ValueError(b)


def vocab() -> tuple[list[str], list[int], list[str]]:
    tokens = [_gpt2_byte_char(b) for b in _BYTES]
    merges = []
    for a, b in _MERGES:
        tokens.append(a + b)
        merges.append(f"{a} {b}")
    types = [1] * len(tokens)  # NORMAL
    tokens += _SPECIALS
    types += [3] * len(_SPECIALS)  # CONTROL
    return tokens, types, merges


def check_spec(spec: SynthSpec) -> None:
    if spec.arch != "llama":
        raise UsageError(f"synth: arch {spec.arch!r} is not supported (supported: llama)")
    for name in ("layers", "embd", "heads", "kv_heads", "ff", "ctx"):
        if getattr(spec, name) <= 0:
            raise UsageError(f"synth: --{name.replace('_', '-')} must be positive")
    if spec.embd % spec.heads:
        raise UsageError(f"synth: --embd {spec.embd} must be a multiple of --heads {spec.heads}")
    if spec.heads % spec.kv_heads:
        raise UsageError(f"synth: --heads {spec.heads} must be a multiple of --kv-heads {spec.kv_heads}")
    if (spec.embd // spec.heads) % 2:
        raise UsageError("synth: head size (embd / heads) must be even for RoPE")
    if spec.noise < 0:
        raise UsageError("synth: --noise must be >= 0")
    if spec.experts or spec.experts_used:
        raise UsageError("synth: experts are not supported for arch llama (leave experts/experts_used at 0)")
    if spec.perturb_seed < 0 or spec.seed < 0:
        raise UsageError("synth: --seed and --perturb-seed must be >= 0")


def _tensors(spec: SynthSpec, n_vocab: int):
    import numpy as np

    rng = np.random.Generator(np.random.PCG64(spec.seed))
    prng = np.random.Generator(np.random.PCG64(10_000 + spec.perturb_seed)) if spec.noise else None
    head = spec.embd // spec.heads
    kv = spec.kv_heads * head

    def w(rows, cols, scale=None):
        scale = scale if scale is not None else 1.0 / np.sqrt(cols)
        a = rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(scale)
        if prng is not None:  # relative noise, drawn from its own stream so the base weights stay identical
            a = a * (1 + np.float32(spec.noise) * prng.standard_normal(a.shape, dtype=np.float32))
        return a.astype(np.float16 if spec.dtype == "f16" else np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n, dtype=np.float32)).astype(np.float32)

    out = [("token_embd.weight", w(n_vocab, spec.embd, 1.0))]
    for i in range(spec.layers):
        p = f"blk.{i}."
        out += [
            (p + "attn_norm.weight", norm(spec.embd)),
            (p + "attn_q.weight", w(spec.embd, spec.embd)),
            (p + "attn_k.weight", w(kv, spec.embd)),
            (p + "attn_v.weight", w(kv, spec.embd)),
            (p + "attn_output.weight", w(spec.embd, spec.embd)),
            (p + "ffn_norm.weight", norm(spec.embd)),
            (p + "ffn_gate.weight", w(spec.ff, spec.embd)),
            (p + "ffn_up.weight", w(spec.ff, spec.embd)),
            (p + "ffn_down.weight", w(spec.embd, spec.ff)),
        ]
    out += [("output_norm.weight", norm(spec.embd)), ("output.weight", w(n_vocab, spec.embd, 1.5 / np.sqrt(spec.embd)))]
    return out


def synth_gguf(out_path: str | Path, spec: SynthSpec) -> str:
    """Write the model atomically; return its sha256."""
    import gguf

    check_spec(spec)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tokens, types, merges = vocab()
    fd, tmp = tempfile.mkstemp(prefix=f".{out_path.name}.", suffix=".tmp", dir=out_path.parent)
    os.close(fd)
    try:
        wr = gguf.GGUFWriter(tmp, "llama")
        wr.add_name(f"parity-synth-{spec.arch}-{spec.dtype}-s{spec.seed}")
        wr.add_context_length(spec.ctx)
        wr.add_embedding_length(spec.embd)
        wr.add_block_count(spec.layers)
        wr.add_feed_forward_length(spec.ff)
        wr.add_head_count(spec.heads)
        wr.add_head_count_kv(spec.kv_heads)
        wr.add_rope_dimension_count(spec.embd // spec.heads)
        wr.add_layer_norm_rms_eps(1e-5)
        wr.add_file_type(1 if spec.dtype == "f16" else 0)
        wr.add_tokenizer_model("gpt2")
        wr.add_tokenizer_pre("default")
        wr.add_token_list(tokens)
        wr.add_token_types(types)
        wr.add_token_merges(merges)
        wr.add_bos_token_id(tokens.index("<|bos|>"))
        wr.add_eos_token_id(tokens.index("<|im_end|>"))
        wr.add_add_bos_token(False)
        wr.add_chat_template(CHAT_TEMPLATE)
        for name, arr in _tensors(spec, len(tokens)):
            wr.add_tensor(name, arr)
        wr.write_header_to_file()
        wr.write_kv_data_to_file()
        wr.write_tensors_to_file()
        wr.close()
        os.chmod(tmp, 0o644)
        os.replace(tmp, out_path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return sha256_file(out_path)


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".synth.json")


def ensure_model(profile: Profile, name: str) -> str:
    """Path of a profile model; synthesized when it has a synth spec and the file
    is missing or was made from another spec."""
    m = profile.model(name)
    path = Path(m.path)
    if m.hf is not None:
        from parity.models.hf_tiny import ensure_profile_model

        return str(ensure_profile_model(profile, name))
    if m.synth is None:
        if not path.is_file():
            raise UsageError(f"model {name}: file not found: {path}")
        return str(path)
    if is_current(path, m.synth):
        return str(path)
    write_model(path, m.synth, label=f"model {name}: ")
    return str(path)


def is_current(path: Path, spec: SynthSpec) -> bool:
    """The file exists and its sidecar says it was made from this spec (and has its size)."""
    try:
        side = json.loads(_sidecar(path).read_text())
        return side.get("spec") == asdict(spec) and side.get("bytes", path.stat().st_size) == path.stat().st_size
    except (OSError, ValueError, AttributeError):
        return False


def recorded_sha256(path: str | Path) -> str | None:
    """The sha256 the sidecar recorded when the file was synthesized (valid once is_current)."""
    try:
        return json.loads(_sidecar(Path(path)).read_text()).get("sha256")
    except (OSError, ValueError, AttributeError):
        return None


def write_model(path: str | Path, spec: SynthSpec, label: str = "") -> str:
    """Synthesize to path and write the `<path>.synth.json` sidecar; returns the sha256."""
    from parity.artifacts import atomic_write_json

    path = Path(path)
    try:
        digest = synth_gguf(path, spec)
        atomic_write_json(_sidecar(path), {"spec": asdict(spec), "sha256": digest, "bytes": path.stat().st_size})
    except OSError as e:
        raise UsageError(f"{label}cannot write {path}: {e.strerror or e}") from None
    return digest


def campaign_step(ctx, options: dict) -> dict:
    """kind: synth -- options {models: [names]} (default: every synth and hf model of the profile)."""
    names = options.get("models") or [n for n, m in ctx.profile.models.items() if m.synth is not None or m.hf is not None]
    if not isinstance(names, list):
        raise ConfigError("campaign", "with.models", "must be a list of model names")
    result = {}
    for n in names:
        p = ensure_model(ctx.profile, n)
        result[n] = {"path": p, "sha256": recorded_sha256(p) or sha256_file(p)}  # no re-read of a large model
        ctx.out.info(f"  model {n}: {p}")
    return result
