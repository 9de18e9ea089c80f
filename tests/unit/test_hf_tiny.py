"""parity.models.hf_tiny: same spec -> same bytes, a valid safetensors file, the
successor/copy-back structure that gives greedy decoding its margin.  (Real vLLM and
convert_hf_to_gguf.py read these files in tests/integration/test_vllm_real.py.)"""

from __future__ import annotations

import hashlib
import json
import struct

import numpy as np
import pytest

from parity.decode import replace
from parity.errors import InfraError, UsageError
from parity.models import hf_tiny as ht

SMALL = ht.HfTinySpec(hidden=64, heads=4, kv_heads=2, ff=128)


@pytest.fixture
def sp_model(tmp_path):
    # the tokenizer file is copied verbatim; its content does not matter here
    p = tmp_path / "tokenizer.model.v1"
    p.write_bytes(b"stand-in sentencepiece model")
    return p


def read_safetensors(data: bytes) -> dict[str, np.ndarray]:
    """A reader written from the format's spec (not from the writer above)."""
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    header.pop("__metadata__", None)
    body = data[8 + n :]
    spans = sorted(tuple(v["data_offsets"]) for v in header.values())
    assert spans[0][0] == 0 and spans[-1][1] == len(body)
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))  # contiguous, no gaps or overlaps
    assert (8 + n) % 8 == 0
    return {k: np.frombuffer(body[v["data_offsets"][0] : v["data_offsets"][1]], dtype="<f4").reshape(v["shape"]) for k, v in header.items() if v["dtype"] == "F32"}


def test_same_spec_same_bytes_and_seed_changes_weights(tmp_path, sp_model):
    a = ht.write_checkpoint(tmp_path / "a", SMALL, sp_model)
    b = ht.write_checkpoint(tmp_path / "b", SMALL, sp_model)
    assert a == b
    for name in a["files"]:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
        assert hashlib.sha256((tmp_path / "a" / name).read_bytes()).hexdigest() == a["files"][name]
    c = ht.write_checkpoint(tmp_path / "c", replace(SMALL, seed=1), sp_model)
    assert c["files"]["model.safetensors"] != a["files"]["model.safetensors"]
    assert c["files"]["config.json"] == a["files"]["config.json"]
    assert (tmp_path / "a" / "tokenizer.model").read_bytes() == sp_model.read_bytes()


def test_checkpoint_files_and_config(tmp_path, sp_model):
    d = ht.ensure_checkpoint(tmp_path / "m", SMALL, sp_model)
    assert sorted(p.name for p in d.iterdir()) == sorted(
        ["config.json", "generation_config.json", "model.safetensors", "special_tokens_map.json", "tokenizer.model", "tokenizer.model.v1", "tokenizer_config.json", ht.SIDECAR]
    )
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["vocab_size"] == 32000 and cfg["hidden_size"] == 64
    assert cfg["num_key_value_heads"] == 2 and cfg["head_dim"] == 16 and cfg["torch_dtype"] == "float32"
    tok = json.loads((d / "tokenizer_config.json").read_text())
    assert tok["tokenizer_class"] == "LlamaTokenizer" and tok["bos_token"] == "<s>" and tok["add_bos_token"] is True
    t = read_safetensors((d / "model.safetensors").read_bytes())
    assert t["model.embed_tokens.weight"].shape == (32000, 64)
    assert t["model.layers.1.self_attn.k_proj.weight"].shape == (32, 64)
    assert t["lm_head.weight"].shape == (32000, 64) and len(t) == 1 + 9 * SMALL.layers + 2


def test_ensure_rewrites_only_when_the_spec_changed(tmp_path, sp_model):
    d = tmp_path / "m"
    ht.ensure_checkpoint(d, SMALL, sp_model)
    stamp = (d / "model.safetensors").stat().st_mtime_ns
    ht.ensure_checkpoint(d, SMALL, sp_model)
    assert (d / "model.safetensors").stat().st_mtime_ns == stamp
    assert not ht.is_current(d, replace(SMALL, seed=3))
    ht.ensure_checkpoint(d, replace(SMALL, seed=3), sp_model)
    assert ht.is_current(d, replace(SMALL, seed=3))
    (d / "tokenizer.model").unlink()
    assert not ht.is_current(d, replace(SMALL, seed=3))


def test_structure_successor_head_and_copy_back_attention():
    t = dict(ht.tensors(SMALL))
    emb, head = t["model.embed_tokens.weight"], t["lm_head.weight"]
    # each lm_head row is a scaled copy of one embedding row (its token's "successor")
    scale = np.float32(SMALL.logit_scale / np.sqrt(SMALL.hidden))
    succ = [int(np.argmin(np.square(emb * scale - head[i]).sum(1))) for i in range(20)]
    assert all(np.array_equal(head[i], emb[j] * scale) for i, j in enumerate(succ))
    assert len(set(succ)) == 20 and succ != list(range(20))
    # o_proj: head h = transpose of its kv head's v_proj rows (GQA: heads 0,1 -> kv 0), scaled
    hd, group = SMALL.hidden // SMALL.heads, SMALL.heads // SMALL.kv_heads
    for layer in range(SMALL.layers):
        v, o = (t[f"model.layers.{layer}.self_attn.{n}_proj.weight"].astype(np.float64) for n in ("v", "o"))
        blocks = np.concatenate([v[(h // group) * hd : (h // group + 1) * hd].T for h in range(SMALL.heads)], axis=1)
        c = SMALL.attn_scale * SMALL.hidden / np.square(v).sum() / group
        assert np.allclose(o, c * blocks, rtol=1e-6, atol=0)


def test_bad_specs_are_usage_errors():
    for bad in (replace(SMALL, hidden=65), replace(SMALL, kv_heads=3), replace(SMALL, layers=0), replace(SMALL, seed=-1), replace(SMALL, logit_scale=0)):
        with pytest.raises(UsageError):
            ht.files(bad, __file__)


def test_find_tokenizer_checks_the_file(tmp_path):
    with pytest.raises(InfraError, match="mistral_common is a vLLM dependency"):
        ht.find_tokenizer(tmp_path)
    p = tmp_path / "mistral_common" / "data" / ht.TOKENIZER_FILE
    p.parent.mkdir(parents=True)
    p.write_bytes(b"not the v1 model")
    with pytest.raises(InfraError, match="another mistral_common release"):
        ht.find_tokenizer(tmp_path)


def test_convert_failure_is_one_line(tmp_path):
    tree = tmp_path / "llama.cpp"
    tree.mkdir()
    (tree / "convert_hf_to_gguf.py").write_text("import sys\nprint('INFO:hf-to-gguf:Loading model')\nsys.exit('ERROR: Model LlamaForCausalLM is not supported')\n")
    import sys

    with pytest.raises(InfraError) as e:
        ht.convert_to_gguf(tmp_path, tmp_path / "out.gguf", tree, sys.executable)
    assert "\n" not in str(e.value) and "(exit 1): ERROR: Model LlamaForCausalLM is not supported" in str(e.value)
    assert not (tmp_path / "out.gguf").exists() and not (tmp_path / "out.gguf.partial").exists()
    with pytest.raises(UsageError, match="no convert_hf_to_gguf.py"):
        ht.convert_to_gguf(tmp_path, tmp_path / "out.gguf", tmp_path / "nowhere", sys.executable)


def test_ensure_gguf_converts_once_per_checkpoint_and_converter(tmp_path, sp_model):
    import sys

    tree = tmp_path / "llama.cpp"
    tree.mkdir()
    runs = tmp_path / "runs.txt"
    script = "import sys, os\nopen(%r, 'a').write('run\\n')\nout = sys.argv[sys.argv.index('--outfile') + 1]\nopen(out, 'wb').write(b'GGUF' + os.environ['PYTHONPATH'].encode())\n" % str(runs)
    (tree / "convert_hf_to_gguf.py").write_text(script)
    hf = ht.ensure_checkpoint(tmp_path / "hf", SMALL, sp_model)
    out = tmp_path / "m.f32.gguf"
    assert ht.ensure_gguf(hf, out, tree, sys.executable) == out
    assert out.read_bytes() == b"GGUF" + str(tree / "gguf-py").encode()  # the tree's own gguf-py
    ht.ensure_gguf(hf, out, tree, sys.executable)
    assert runs.read_text().count("run") == 1
    ht.ensure_checkpoint(hf, replace(SMALL, seed=5), sp_model)  # new weights -> convert again
    ht.ensure_gguf(hf, out, tree, sys.executable)
    (tree / "convert_hf_to_gguf.py").write_text(script + "# another converter\n")
    ht.ensure_gguf(hf, out, tree, sys.executable)
    assert runs.read_text().count("run") == 3
    with pytest.raises(UsageError, match="not an hf-tiny checkpoint"):
        ht.ensure_gguf(tmp_path, out, tree, sys.executable)


def test_converting_leaves_no_bytecode_in_the_source_tree(tmp_path, sp_model, monkeypatch):
    # the converter imports the tree's own gguf-py; its __pycache__ once changed the cached
    # source's tree id, and check-series then refused the build's own tree
    import sys

    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    tree = tmp_path / "llama.cpp"
    (tree / "gguf-py" / "gguf").mkdir(parents=True)
    (tree / "gguf-py" / "gguf" / "__init__.py").write_text("MAGIC = b'GGUF'\n")
    (tree / "convert_hf_to_gguf.py").write_text("import sys, gguf\nopen(sys.argv[sys.argv.index('--outfile') + 1], 'wb').write(gguf.MAGIC)\n")
    hf = ht.ensure_checkpoint(tmp_path / "hf", SMALL, sp_model)
    ht.convert_to_gguf(hf, tmp_path / "m.gguf", tree, sys.executable)
    assert (tmp_path / "m.gguf").read_bytes() == b"GGUF"
    assert list(tree.rglob("__pycache__")) == []
