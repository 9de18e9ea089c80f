"""Tiny qwen35 (dense hybrid) and qwen35moe (MoE hybrid) GGUFs: same seed same bytes, the
keys and tensor shapes the pin's loaders (src/models/qwen35*.cpp) ask for, and both layer
kinds present.  Loading and generating with the real engines is in test_real_engine_gates."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from parity.decode import replace
from parity.config import SynthSpec
from parity.errors import UsageError
from parity.models.synth import synth_gguf

DENSE = SynthSpec(arch="qwen35", dtype="f16", seed=0, layers=4, embd=64, heads=4, kv_heads=2, ff=128, ctx=4096)
MOE = replace(DENSE, arch="qwen35moe", ff=64, experts=8, experts_used=2)


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _read(path):
    import gguf

    r = gguf.GGUFReader(str(path))
    f = r.fields

    def val(k):
        c = f[k].contents()
        return list(c) if isinstance(c, list) else c

    shapes = {t.name: (tuple(int(x) for x in t.shape), t.tensor_type.name) for t in r.tensors}
    return val, shapes


@pytest.mark.parametrize("spec", [DENSE, MOE], ids=["qwen35", "qwen35moe"])
def test_same_seed_same_bytes(tmp_path, spec):
    a = synth_gguf(tmp_path / "a.gguf", spec)
    assert a == synth_gguf(tmp_path / "b.gguf", spec) == _sha(tmp_path / "b.gguf")
    assert synth_gguf(tmp_path / "c.gguf", replace(spec, seed=1)) != a
    assert synth_gguf(tmp_path / "d.gguf", replace(spec, dtype="f32")) != a
    assert (tmp_path / "a.gguf").stat().st_size < 2_000_000


def test_qwen35_keys_and_tensors(tmp_path):
    synth_gguf(tmp_path / "m.gguf", DENSE)
    val, shapes = _read(tmp_path / "m.gguf")
    assert val("general.architecture") == "qwen35"
    assert val("qwen35.block_count") == 4 and val("qwen35.full_attention_interval") == 2
    assert (val("qwen35.ssm.conv_kernel"), val("qwen35.ssm.state_size"), val("qwen35.ssm.group_count"), val("qwen35.ssm.time_step_rank"), val("qwen35.ssm.inner_size")) == (4, 16, 2, 4, 64)
    assert val("qwen35.attention.key_length") == 16 and val("qwen35.rope.dimension_count") == 8
    assert val("qwen35.rope.dimension_sections") == [2, 1, 1, 0]  # sums to n_rot / 2
    # layers 0 and 2: gated DeltaNet; 1 and 3: gated full attention (GGUF shapes are ne order)
    conv_dim = 2 * 16 * 2 + 64
    for i in (0, 2):
        assert shapes[f"blk.{i}.attn_qkv.weight"] == ((64, conv_dim), "F16")
        assert shapes[f"blk.{i}.attn_gate.weight"] == ((64, 64), "F16")
        assert shapes[f"blk.{i}.ssm_conv1d.weight"] == ((4, conv_dim), "F32")
        assert shapes[f"blk.{i}.ssm_a"] == ((4,), "F32") and shapes[f"blk.{i}.ssm_dt.bias"] == ((4,), "F32")
        assert shapes[f"blk.{i}.ssm_alpha.weight"] == shapes[f"blk.{i}.ssm_beta.weight"] == ((64, 4), "F16")
        assert shapes[f"blk.{i}.ssm_norm.weight"] == ((16,), "F32") and shapes[f"blk.{i}.ssm_out.weight"] == ((64, 64), "F16")
        assert f"blk.{i}.attn_q.weight" not in shapes
    for i in (1, 3):
        assert shapes[f"blk.{i}.attn_q.weight"] == ((64, 2 * 4 * 16), "F16")  # query + gate
        assert shapes[f"blk.{i}.attn_k.weight"] == shapes[f"blk.{i}.attn_v.weight"] == ((64, 32), "F16")
        assert shapes[f"blk.{i}.attn_q_norm.weight"] == ((16,), "F32") and f"blk.{i}.ssm_a" not in shapes
    assert all(shapes[f"blk.{i}.post_attention_norm.weight"] == ((64,), "F32") for i in range(4))
    assert shapes["blk.0.ffn_down.weight"] == ((128, 64), "F16")


def test_qwen35_state_decays():
    """ssm_a = -exp(A_log) < 0: the recurrent state decays instead of blowing up."""
    import numpy as np

    from parity.models.synth import _tensors

    t = dict(_tensors(DENSE, 111))
    assert all(np.all(t[f"blk.{i}.ssm_a"] < 0) for i in (0, 2))


def test_qwen35moe_experts(tmp_path):
    synth_gguf(tmp_path / "m.gguf", MOE)
    val, shapes = _read(tmp_path / "m.gguf")
    assert val("general.architecture") == "qwen35moe"
    assert (val("qwen35moe.expert_count"), val("qwen35moe.expert_used_count")) == (8, 2)
    assert val("qwen35moe.expert_feed_forward_length") == val("qwen35moe.expert_shared_feed_forward_length") == 64
    assert shapes["blk.3.ffn_gate_inp.weight"] == ((64, 8), "F32")  # the router stays F32
    assert shapes["blk.3.ffn_gate_exps.weight"] == shapes["blk.3.ffn_up_exps.weight"] == ((64, 64, 8), "F16")
    assert shapes["blk.3.ffn_down_exps.weight"] == ((64, 64, 8), "F16")
    assert shapes["blk.0.ffn_gate_inp_shexp.weight"] == ((64,), "F32")
    assert "blk.0.ffn_gate.weight" not in shapes


@pytest.mark.parametrize(
    "over, msg",
    [
        ({"arch": "qwen35moe", "experts": 0, "experts_used": 0}, "needs --experts >= 2"),
        ({"arch": "qwen35moe", "experts": 4, "experts_used": 5}, "needs --experts >= 2"),
        ({"arch": "qwen35", "experts": 4, "experts_used": 2}, "experts are not supported for arch qwen35"),
        ({"arch": "qwen35", "embd": 72, "heads": 4}, "multiple of 4"),
        ({"arch": "mamba"}, "supported: llama, qwen35, qwen35moe"),
    ],
)
def test_bad_specs(tmp_path, over, msg):
    with pytest.raises(UsageError, match=msg):
        synth_gguf(tmp_path / "x.gguf", replace(DENSE, **over))


def test_cli_qwen35moe_with_nothing_but_its_required_arguments(tmp_path):
    """A newcomer's call: no --experts; the tiny MoE's 8 experts top 2 are the default."""
    import json
    import subprocess
    import sys

    out = tmp_path / "m.gguf"
    r = subprocess.run([sys.executable, "-m", "parity", "models", "synth", "--arch", "qwen35moe", "--out", str(out), "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["spec"]["experts"] == 8 and out.is_file()
    val, _ = _read(out)
    assert (val("qwen35moe.expert_count"), val("qwen35moe.expert_used_count")) == (8, 2)
    bad = subprocess.run([sys.executable, "-m", "parity", "models", "synth", "--arch", "qwen35moe", "--experts", "4", "--experts-used", "5", "--out", str(out)], capture_output=True, text=True)
    assert bad.returncode == 2 and "needs --experts >= 2" in bad.stderr and "Traceback" not in bad.stderr
