"""Deterministic tiny GGUF models (byte-level BPE vocab, random weights) of three
architectures: llama; qwen35, the users' dense hybrid (gated-DeltaNet layers and gated
full-attention layers); qwen35moe, the same with routed + shared experts in every layer.

Same SynthSpec -> byte-identical file.  `noise`/`perturb_seed` add relative
Gaussian noise to every weight: the same model, slightly lossy, for KL gates.

qwen35/qwen35moe follow the pin's src/models/qwen35*.cpp loaders: every 2nd layer is full
attention (full_attention_interval 2, so even 2 layers have both kinds); attention heads
`heads` x head_dim (embd / heads) with a joint query+gate projection, Q/K RMS norms, IMROPE
on half the head; gated DeltaNet with `kv_heads` key heads and `heads` value heads of
head_dim (ssm.state_size = head_dim, ssm.inner_size = heads * head_dim), a 4-tap conv;
qwen35moe: `experts` experts of `ff` (top `experts_used`), one shared expert of `ff`.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from msgspec.structs import asdict

from parity.files import sha256_file
from parity.models.spec import SynthSpec
from parity.errors import ConfigError, UsageError
from parity.gpu.held import refuse_while_held
from parity.files import atomic_write_json
from parity.models.hf_tiny import ensure_profile_model

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


ARCHS = ("llama", "qwen35", "qwen35moe")
CONV_KERNEL = 4
FULL_ATTENTION_INTERVAL = 2


def check_spec(spec: SynthSpec) -> None:
    if spec.arch not in ARCHS:
        raise UsageError(f"synth: arch {spec.arch!r} is not supported (supported: {', '.join(ARCHS)})")
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
    if spec.arch == "qwen35moe":
        if spec.experts < 2 or not 0 < spec.experts_used <= spec.experts:
            raise UsageError("synth: qwen35moe needs --experts >= 2 and 0 < --experts-used <= --experts")
    elif spec.experts or spec.experts_used:
        raise UsageError(f"synth: experts are not supported for arch {spec.arch} (leave experts/experts_used at 0)")
    if spec.arch != "llama" and (spec.embd // spec.heads) % 4:
        raise UsageError(f"synth: {spec.arch} needs a head size (embd / heads) that is a multiple of 4 (IMROPE sections)")
    if spec.perturb_seed < 0 or spec.seed < 0:
        raise UsageError("synth: --seed and --perturb-seed must be >= 0")


def _generators(spec: SynthSpec):
    """(w, f32, norm): weights in the spec's dtype (noise applied), f32 weights (routers, conv
    taps: llama.cpp keeps those in F32), RMS-norm weights around 1."""
    import numpy as np

    rng = np.random.Generator(np.random.PCG64(spec.seed))
    prng = np.random.Generator(np.random.PCG64(10_000 + spec.perturb_seed)) if spec.noise else None

    def raw(shape, scale):
        a = rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)
        if prng is not None:  # relative noise, drawn from its own stream so the base weights stay identical
            a = a * (1 + np.float32(spec.noise) * prng.standard_normal(a.shape, dtype=np.float32))
        return a

    def w(rows, cols, scale=None, lead=()):
        scale = scale if scale is not None else 1.0 / np.sqrt(cols)
        return raw((*lead, rows, cols), scale).astype(np.float16 if spec.dtype == "f16" else np.float32)

    def f32(shape, scale):
        return raw(shape, scale).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n, dtype=np.float32)).astype(np.float32)

    return w, f32, norm, rng


def _tensors(spec: SynthSpec, n_vocab: int):
    if spec.arch != "llama":
        return _qwen35_tensors(spec, n_vocab)
    import numpy as np

    w, _, norm, _ = _generators(spec)
    head = spec.embd // spec.heads
    kv = spec.kv_heads * head

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


def is_recurrent(layer: int) -> bool:
    """qwen35: gated-DeltaNet layers, every FULL_ATTENTION_INTERVAL-th layer is full attention."""
    return (layer + 1) % FULL_ATTENTION_INTERVAL != 0


def _qwen35_tensors(spec: SynthSpec, n_vocab: int):
    """Tensors in the order and shapes the pin's llama_model_qwen35{,moe}::load_arch_tensors
    asks for (numpy shapes are GGUF's ne reversed)."""
    import numpy as np

    w, f32, norm, rng = _generators(spec)
    e, hd = spec.embd, spec.embd // spec.heads
    kv = spec.kv_heads * hd
    key_dim, value_dim = hd * spec.kv_heads, hd * spec.heads  # GDN: kv_heads key heads, heads value heads
    conv_dim = 2 * key_dim + value_dim
    out = [("token_embd.weight", w(n_vocab, e, 1.0))]
    for i in range(spec.layers):
        p = f"blk.{i}."
        out += [(p + "attn_norm.weight", norm(e)), (p + "post_attention_norm.weight", norm(e))]
        if is_recurrent(i):
            out += [
                (p + "attn_qkv.weight", w(conv_dim, e)),
                (p + "attn_gate.weight", w(value_dim, e)),
                (p + "ssm_conv1d.weight", f32((conv_dim, CONV_KERNEL), 0.5)),
                (p + "ssm_dt.bias", f32((spec.heads,), 0.5)),
                # A = -exp(A_log): negative, so the state decays (the converter stores it so)
                (p + "ssm_a", -np.exp(rng.uniform(-1.0, 0.5, spec.heads)).astype(np.float32)),
                (p + "ssm_beta.weight", w(spec.heads, e)),
                (p + "ssm_alpha.weight", w(spec.heads, e)),
                (p + "ssm_norm.weight", norm(hd)),
                (p + "ssm_out.weight", w(e, value_dim)),
            ]
        else:
            out += [
                (p + "attn_q.weight", w(2 * spec.heads * hd, e)),  # query and its output gate
                (p + "attn_k.weight", w(kv, e)),
                (p + "attn_v.weight", w(kv, e)),
                (p + "attn_output.weight", w(e, spec.heads * hd)),
                (p + "attn_q_norm.weight", norm(hd)),
                (p + "attn_k_norm.weight", norm(hd)),
            ]
        if spec.arch == "qwen35":
            out += [(p + "ffn_gate.weight", w(spec.ff, e)), (p + "ffn_down.weight", w(e, spec.ff)), (p + "ffn_up.weight", w(spec.ff, e))]
        else:
            n = spec.experts
            out += [
                (p + "ffn_gate_inp.weight", f32((n, e), 1.0 / np.sqrt(e))),
                (p + "ffn_down_exps.weight", w(e, spec.ff, lead=(n,))),
                (p + "ffn_gate_exps.weight", w(spec.ff, e, lead=(n,))),
                (p + "ffn_up_exps.weight", w(spec.ff, e, lead=(n,))),
                (p + "ffn_gate_inp_shexp.weight", f32((e,), 1.0 / np.sqrt(e))),
                (p + "ffn_gate_shexp.weight", w(spec.ff, e)),
                (p + "ffn_up_shexp.weight", w(spec.ff, e)),
                (p + "ffn_down_shexp.weight", w(e, spec.ff)),
            ]
    out += [("output_norm.weight", norm(e)), ("output.weight", w(n_vocab, e, 1.5 / np.sqrt(e)))]
    return out


def _arch_keys(wr, spec: SynthSpec) -> None:
    """The hyperparameters llama_model_qwen35{,moe}::load_arch_hparams reads."""
    hd = spec.embd // spec.heads
    n_rot = hd // 2
    wr.add_key_length(hd)
    wr.add_value_length(hd)
    wr.add_rope_dimension_count(n_rot)
    # IMROPE sections over n_rot / 2 rotary pairs (the real models: [11, 11, 10, 0] of 32)
    pairs = n_rot // 2
    wr.add_rope_dimension_sections([pairs - 2 * (pairs // 4), pairs // 4, pairs // 4, 0])
    wr.add_rope_freq_base(10_000_000.0)
    wr.add_ssm_conv_kernel(CONV_KERNEL)
    wr.add_ssm_state_size(hd)
    wr.add_ssm_group_count(spec.kv_heads)
    wr.add_ssm_time_step_rank(spec.heads)
    wr.add_ssm_inner_size(hd * spec.heads)
    wr.add_full_attention_interval(FULL_ATTENTION_INTERVAL)
    if spec.arch == "qwen35moe":
        wr.add_expert_count(spec.experts)
        wr.add_expert_used_count(spec.experts_used)
        wr.add_expert_feed_forward_length(spec.ff)
        wr.add_expert_shared_feed_forward_length(spec.ff)


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
        wr = gguf.GGUFWriter(tmp, spec.arch)
        wr.add_name(f"parity-synth-{spec.arch}-{spec.dtype}-s{spec.seed}")
        wr.add_context_length(spec.ctx)
        wr.add_embedding_length(spec.embd)
        wr.add_block_count(spec.layers)
        wr.add_feed_forward_length(spec.ff)
        wr.add_head_count(spec.heads)
        wr.add_head_count_kv(spec.kv_heads)
        if spec.arch == "llama":
            wr.add_rope_dimension_count(spec.embd // spec.heads)
        else:
            _arch_keys(wr, spec)
        wr.add_layer_norm_rms_eps(1e-5 if spec.arch == "llama" else 1e-6)
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


def ensure_model(profile, name: str) -> str:
    """Path of a profile model; synthesized when it has a synth spec and the file
    is missing or was made from another spec."""
    m = profile.model(name)
    path = Path(m.path)
    if m.hf is not None:
        return str(ensure_profile_model(profile, name))
    if m.synth is None:
        if not path.is_file():
            raise UsageError(f"model {name}: file not found: {path}")
        return str(path)
    if is_current(path, m.synth):
        return str(path)
    write_model(path, m.synth, label=f"model {name}: ")  # a temp file renamed into place: racing runs agree
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

    path = Path(path)
    refuse_while_held(f"{label}the synthesis of {path}")
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
