"""Bytes per decode step on REAL GGUF files parity synthesizes (tiny llama, qwen35, qwen35moe,
and a quantized copy), checked against an independent sum: the file's own tensor sizes
(GGUFReader's tensor.n_bytes) and the KV / state sizes worked out from the synth spec."""

from __future__ import annotations

from pathlib import Path

import pytest

from parity.config import SynthSpec
from parity.decode import replace
from parity.efficiency.bytes_per_token import QUANTITIES, decode_bytes, expected_experts, expert_share, formula
from parity.models.synth import synth_gguf

LLAMA = SynthSpec(arch="llama", dtype="f16", seed=0)
QWEN35 = SynthSpec(arch="qwen35", dtype="f16", seed=0, layers=4, embd=64, heads=4, kv_heads=2, ff=128, ctx=4096)
MOE = replace(QWEN35, arch="qwen35moe", ff=64, experts=8, experts_used=2)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("eff-models")
    out = {}
    for name, spec in (("llama", LLAMA), ("qwen35", QWEN35), ("qwen35moe", MOE)):
        synth_gguf(d / f"{name}.gguf", spec)
        out[name] = (d / f"{name}.gguf", spec)
    out["qwen35moe-q8_0"] = (quantized_copy(d / "qwen35moe-q8_0.gguf", MOE), MOE)
    return out


def quantized_copy(path: Path, spec: SynthSpec) -> Path:
    """The same synth model with every 2-D/3-D weight whose rows hold whole Q8_0 blocks stored
    as Q8_0 (gguf's reference quantizer, the format llama-quantize writes)."""
    import gguf
    import numpy as np

    real_add = gguf.GGUFWriter.add_tensor

    def add_tensor(self, name, arr, *a, **kw):
        if arr.ndim >= 2 and arr.shape[-1] % 32 == 0 and name.endswith(".weight") and "norm" not in name:
            q = gguf.quants.quantize(arr.astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
            return real_add(self, name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        return real_add(self, name, arr, *a, **kw)

    gguf.GGUFWriter.add_tensor = add_tensor
    try:
        synth_gguf(path, replace(spec, dtype="f32"))
    finally:
        gguf.GGUFWriter.add_tensor = real_add
    return path


def independent_weights(path: Path, n_seqs: int = 1) -> float:
    """Sum of tensor.n_bytes from the file, the embedding as n_seqs rows of ne0, routed experts
    (name contains _exps) x the expected distinct share: written here, not by the code under test."""
    import gguf

    r = gguf.GGUFReader(str(path))
    arch = r.fields["general.architecture"].contents()
    e = r.fields.get(f"{arch}.expert_count")
    u = r.fields.get(f"{arch}.expert_used_count")
    share = 1 - (1 - u.contents() / e.contents()) ** n_seqs if e else 1.0
    total = 0.0
    for t in r.tensors:
        if t.name == "token_embd.weight":
            total += int(t.n_bytes) / int(t.shape[1]) * n_seqs  # ne1 rows of equal size
        elif "_exps." in t.name:
            total += int(t.n_bytes) * share
        else:
            total += int(t.n_bytes)
    return total


def spec_kv(spec: SynthSpec, context: int) -> float:
    hd = spec.embd // spec.heads
    attn = spec.layers if spec.arch == "llama" else spec.layers // 2  # synth: every 2nd layer is full attention
    return attn * spec.kv_heads * hd * 2 * 2 * context  # K and V, f16


def spec_state(spec: SynthSpec) -> float:
    if spec.arch == "llama":
        return 0
    hd = spec.embd // spec.heads
    conv_dim = 2 * spec.kv_heads * hd + spec.heads * hd
    per_layer = (4 - 1) * conv_dim + hd * spec.heads * hd  # conv taps - 1, and the d_state x d_inner matrix
    return (spec.layers - spec.layers // 2) * per_layer * 4 * 2  # f32, read + written


@pytest.mark.parametrize("name", ["llama", "qwen35", "qwen35moe", "qwen35moe-q8_0"])
@pytest.mark.parametrize("n_seqs", [1, 4])
def test_decode_bytes_match_an_independent_sum(models, name, n_seqs):
    path, spec = models[name]
    got = decode_bytes(str(path), 100, n_seqs=n_seqs)
    assert got["weights"] == pytest.approx(independent_weights(path, n_seqs), abs=1)
    assert got["kv"] == pytest.approx(spec_kv(spec, 100), abs=1)
    assert got["state"] == pytest.approx(spec_state(spec), abs=1)
    assert got["total"] == pytest.approx(got["weights"] + n_seqs * (got["kv"] + got["state"]), abs=2)
    assert got["formula"] == formula() and "weights" in got["formula"]


def test_quantized_copy_is_really_quantized_and_smaller(models, tmp_path):
    import gguf

    q, spec = models["qwen35moe-q8_0"]
    types = {t.tensor_type.name for t in gguf.GGUFReader(str(q)).tensors}
    assert "Q8_0" in types
    synth_gguf(tmp_path / "f32.gguf", replace(spec, dtype="f32"))
    # Q8_0 is 34 bytes per 32 values against f32's 128: well under half once the big matrices are quantized
    assert decode_bytes(str(q), 0)["weights"] < 0.5 * decode_bytes(str(tmp_path / "f32.gguf"), 0)["weights"]


def test_moe_active_fraction(models):
    path, spec = models["qwen35moe"]
    import gguf

    r = gguf.GGUFReader(str(path))
    routed = sum(int(t.n_bytes) for t in r.tensors if "_exps." in t.name)
    assert routed > 0
    one, four = decode_bytes(str(path), 0, 1), decode_bytes(str(path), 0, 4)
    assert one["expert_share"] == pytest.approx(2 / 8)
    assert four["expert_share"] == pytest.approx(1 - (6 / 8) ** 4)
    # the step at 4 sequences reads more routed bytes, by exactly the share difference (+3 embedding rows)
    embd_row = next(int(t.n_bytes) / int(t.shape[1]) for t in r.tensors if t.name == "token_embd.weight")
    assert four["weights"] - one["weights"] == pytest.approx(routed * ((1 - (6 / 8) ** 4) - 2 / 8) + 3 * embd_row, abs=2)
    assert expected_experts(8, 2, 1) == pytest.approx(2) and expected_experts(8, 2, 10**6) == pytest.approx(8)
    assert expert_share(0, 0, 5) == 1.0


def test_kv_type_scales_kv_only(models):
    path, _ = models["llama"]
    f16, f32, q8 = (decode_bytes(str(path), 64, kv_type=t) for t in ("f16", "f32", "q8_0"))
    assert f32["kv"] == 2 * f16["kv"] and q8["kv"] == pytest.approx(f16["kv"] * 34 / 64, abs=1)
    assert f16["weights"] == f32["weights"]


def test_quantities_declared_once():
    assert list(QUANTITIES) == ["weights", "kv", "state", "total"]
    assert all(q.formula and q.unit for q in QUANTITIES.values())


