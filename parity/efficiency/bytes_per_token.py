"""Bytes one decode step moves, from the model file (a GGUF's header, parity.gguf.header).

Declared once (QUANTITIES: name, unit, formula in words); reports print these, so the figure
and its meaning never drift apart.  `decode_bytes(model, context, n_seqs)` is the one entry.

What the figure is: the memory traffic a decode step cannot avoid, the roofline's
numerator.  Activations, logits, the new token's K/V write and any re-read a kernel makes
are left out: a real step moves at least this much."""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field
from parity.gguf.constants import constants
from parity.gguf.header import read_header

# blk.N.ffn_{gate,up,down,gate_up}_exps.{weight,bias}: the routed experts (shared ones are _shexp)
ROUTED = re.compile(r"^blk\.\d+\.ffn_[a-z_]*_exps\.")
EMBD = "token_embd.weight"
STATE_BYTES = 4  # llama.cpp keeps the recurrent state (r and s caches) in f32


@dataclass(frozen=True)
class Quantity:
    name: str
    unit: str
    formula: str


QUANTITIES: dict[str, Quantity] = {
    q.name: q
    for q in [
        Quantity("weights", "B/step",
                 "every tensor of the GGUF by its type (elements / block size x type size, gguf.GGML_QUANT_SIZES), read once per step and "
                 "shared by the B sequences of the batch; token_embd.weight counts one row per sequence (a model without output.weight "
                 "uses the table as its output head: then it counts whole); MoE routed experts (blk.N.ffn_*_exps) count their bytes x "
                 "the expected share of distinct experts a step touches, 1 - (1 - used/experts)^B (used/experts at B = 1; uniform, "
                 "independent routing); the router and shared experts (_shexp) count whole"),
        Quantity("kv", "B/step/seq",
                 "per sequence: every attention layer (llama: all; qwen35/qwen35moe: every full_attention_interval-th) reads "
                 "n_kv_heads x (key_length + value_length) x bytes of the KV type (f16: 2) per token of context; the new token's K/V "
                 "write is left out"),
        Quantity("state", "B/step/seq",
                 "per sequence: every gated-DeltaNet layer's f32 recurrent state, read and written once per step: 2 x 4 x "
                 "((conv_kernel - 1) x (inner_size + 2 x group_count x state_size) + state_size x inner_size) (llama.cpp's "
                 "n_embd_r + n_embd_s)"),
        Quantity("total", "B/step", "weights + B x (kv + state): the bytes one decode step of B sequences moves; per token = total / B"),
    ]
}  # fmt: skip


def formula() -> str:
    return "; ".join(f"{q.name} [{q.unit}] = {q.formula}" for q in QUANTITIES.values())


def definitions() -> list[dict]:
    return [{"name": q.name, "unit": q.unit, "formula": q.formula} for q in QUANTITIES.values()]


def type_bytes(type_name: str, elements: int = 1) -> float:
    """Bytes of `elements` values of a ggml type ("F16", "Q8_0", "f16"): elements / block x type size."""

    c = constants()
    t = c.GGMLQuantizationType[type_name.upper()]
    block, size = c.GGML_QUANT_SIZES[t]
    return elements * size / block


@dataclass
class ModelBytes:
    """What the file says, parsed once."""

    path: str
    arch: str
    tensors: list = field(default_factory=list)  # (name, type name, elements, bytes)
    dense: int = 0  # every tensor but the routed experts and the embedding table
    routed: int = 0  # routed expert tensors, whole
    embd_table: int = 0
    embd_row: float = 0.0
    tied_output: bool = False  # no output.weight: the embedding table is the output head
    experts: int = 0
    experts_used: int = 0
    layers: int = 0
    attn_layers: list = field(default_factory=list)
    kv_heads: list = field(default_factory=list)  # per layer
    key_length: int = 0
    value_length: int = 0
    recurrent_layers: list = field(default_factory=list)
    state_elements: int = 0  # f32 values of one recurrent layer's state (conv + ssm)

    def weights(self, n_seqs: int = 1) -> float:
        table = self.embd_table if self.tied_output else 0
        return self.dense + table + self.embd_row * n_seqs + self.routed * expert_share(self.experts, self.experts_used, n_seqs)

    def kv(self, context_tokens: float, kv_type: str = "f16") -> float:
        per_token = sum(self.kv_heads[il] * (self.key_length + self.value_length) for il in self.attn_layers)
        return type_bytes(kv_type, per_token) * context_tokens

    def state(self) -> float:
        return 2 * STATE_BYTES * self.state_elements * len(self.recurrent_layers)


def expert_share(experts: int, used: int, n_seqs: int = 1) -> float:
    """Expected share of the routed experts one step reads at n_seqs sequences:
    1 - (1 - used/experts)^n_seqs (each token picks `used` distinct experts; tokens
    independent, routing uniform).  1 for a dense model."""
    if not experts:
        return 1.0
    return 1.0 - (1.0 - used / experts) ** max(1, n_seqs)


def expected_experts(experts: int, used: int, n_seqs: int = 1) -> float:
    """Expected distinct experts touched per step: experts x expert_share."""
    return experts * expert_share(experts, used, n_seqs)


@functools.lru_cache(maxsize=16)
def _parse(path: str, size: int, mtime: float) -> ModelBytes:
    gguf = constants()

    h = read_header(path)
    arch = h.fields.get("general.architecture", "llama")
    k = lambda name, default=None: h.fields.get(f"{arch}.{name}", default)  # noqa: E731
    mb = ModelBytes(path=path, arch=arch)
    names = set()
    for t in h.tensors:
        tname = gguf.GGMLQuantizationType(t.tensor_type).name
        n = t.n_elements
        nbytes = type_bytes(tname, n)
        mb.tensors.append((t.name, tname, n, nbytes))
        names.add(t.name)
        if t.name == EMBD:
            mb.embd_table = nbytes
            mb.embd_row = type_bytes(tname, t.shape[0])  # ne0: one row
        elif ROUTED.match(t.name):
            mb.routed += nbytes
        else:
            mb.dense += nbytes
    mb.tied_output = "output.weight" not in names
    mb.layers = int(k("block_count", 0))
    heads = k("attention.head_count", 1)
    kvh = k("attention.head_count_kv", heads)
    heads0 = heads[0] if isinstance(heads, list) else heads
    mb.kv_heads = list(kvh) if isinstance(kvh, list) else [kvh] * mb.layers
    head_dim = int(k("embedding_length", 0)) // max(1, int(heads0))
    mb.key_length = int(k("attention.key_length", head_dim))
    mb.value_length = int(k("attention.value_length", head_dim))
    interval = k("full_attention_interval")
    if interval:  # qwen35/qwen35moe: llama.cpp's recurrent_layer_arr[i] = (i + 1) % interval != 0
        mb.attn_layers = [i for i in range(mb.layers) if (i + 1) % int(interval) == 0]
        mb.recurrent_layers = [i for i in range(mb.layers) if (i + 1) % int(interval) != 0]
        d_conv, d_state = int(k("ssm.conv_kernel", 0)), int(k("ssm.state_size", 0))
        d_inner, n_group = int(k("ssm.inner_size", 0)), int(k("ssm.group_count", 0))
        mb.state_elements = max(0, d_conv - 1) * (d_inner + 2 * n_group * d_state) + d_state * d_inner
    else:
        mb.attn_layers = list(range(mb.layers))
    mb.experts, mb.experts_used = int(k("expert_count", 0) or 0), int(k("expert_used_count", 0) or 0)
    return mb


def model_bytes(model_path: str) -> ModelBytes:
    st = os.stat(model_path)
    return _parse(os.path.realpath(model_path), st.st_size, st.st_mtime)


def decode_bytes(model_path: str, context_tokens: float, n_seqs: int = 1, kv_type: str = "f16") -> dict:
    """Bytes one decode step of n_seqs sequences at context_tokens moves: weights (once per
    step, shared), kv and state (per sequence, x n_seqs in total).  See QUANTITIES."""
    mb = model_bytes(model_path)
    w, kv, st = mb.weights(n_seqs), mb.kv(context_tokens, kv_type), mb.state()
    total = w + n_seqs * (kv + st)
    return {
        "model": model_path,
        "arch": mb.arch,
        "n_seqs": n_seqs,
        "context_tokens": context_tokens,
        "kv_type": kv_type,
        "weights": round(w),
        "kv": round(kv),
        "state": round(st),
        "total": round(total),
        "per_token": round(total / n_seqs),
        "expert_share": round(expert_share(mb.experts, mb.experts_used, n_seqs), 6) if mb.experts else None,
        "experts": mb.experts or None,
        "experts_used": mb.experts_used or None,
        "formula": formula(),
    }
