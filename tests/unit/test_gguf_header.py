"""parity.gguf.header against gguf's own GGUFReader: on the captured header of a real
convert_hf_to_gguf.py output (32k-token vocabulary), on models parity synthesizes, on a
big-endian file, and on files that are not GGUFs."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

from parity.efficiency import bytes_per_token
from parity.gguf.header import GGUFHeaderError, read_header
from parity.gguf.header import context_length as gguf_context_length

DATA = Path(__file__).resolve().parent.parent / "data" / "gguf"


def _summ(v):
    if isinstance(v, list) and len(v) > 16:
        return {"len": len(v), "sha256": hashlib.sha256(json.dumps(v).encode()).hexdigest(), "first": v[:3], "last": v[-1]}
    return v


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("gguf") / "hf-tiny-s0.f32.header.gguf"
    p.write_bytes(gzip.decompress((DATA / "hf-tiny-s0.f32.header.gguf.gz").read_bytes()))
    return p


def test_converted_header_reads_as_gguf_reader_read_it(converted):
    import gguf

    want = json.loads((DATA / "hf-tiny-s0.f32.reader.json").read_text())
    h = read_header(str(converted))
    assert h.version == want["version"] == 3
    assert {k: _summ(v) for k, v in h.fields.items()} == want["fields"]
    assert len(h.fields["tokenizer.ggml.tokens"]) == 32000
    got = [[t.name, list(t.shape), gguf.GGMLQuantizationType(t.tensor_type).name, t.n_elements] for t in h.tensors]
    assert got == want["tensors"]
    assert gguf_context_length(str(converted)) == h.fields["llama.context_length"]


def _reader_view(path: Path):
    import gguf

    r = gguf.GGUFReader(str(path))
    fields = {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}
    tensors = [(t.name, tuple(int(x) for x in t.shape), int(t.tensor_type), int(t.n_elements), int(t.data_offset) - r.data_offset) for t in r.tensors]
    return fields, tensors


@pytest.mark.parametrize("arch", ["llama", "qwen35moe"])
def test_synthesized_models_read_as_gguf_reader_reads_them(tmp_path, arch):
    from parity.models.synth import SynthSpec, synth_gguf

    spec = SynthSpec(arch=arch, dtype="f16", seed=3, **({"experts": 4, "experts_used": 2} if arch == "qwen35moe" else {}))
    path = tmp_path / "m.gguf"
    synth_gguf(path, spec)
    fields, tensors = _reader_view(path)
    h = read_header(str(path))
    assert h.fields == fields
    assert [(t.name, t.shape, t.tensor_type, t.n_elements, t.offset) for t in h.tensors] == tensors
    # the per-layer kv-head array of qwen35moe and a scalar of llama both come out as the reader's
    mb = bytes_per_token.model_bytes(str(path))
    assert mb.layers == fields[f"{arch}.block_count"] and mb.tensors and mb.dense > 0


def test_big_endian_file(tmp_path):
    import gguf
    import numpy as np

    path = tmp_path / "be.gguf"
    w = gguf.GGUFWriter(str(path), "llama", endianess=gguf.GGUFEndian.BIG)
    w.add_context_length(4096)
    w.add_array("llama.attention.head_count_kv", [2, 4, 8])
    w.add_tensor("t", np.arange(6, dtype=np.float32).reshape(2, 3).byteswap().view(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    fields, tensors = _reader_view(path)
    h = read_header(str(path))
    assert h.fields == fields and h.fields["llama.context_length"] == 4096
    assert [(t.name, t.shape, t.tensor_type) for t in h.tensors] == [(n, s, ty) for n, s, ty, _, _ in tensors] == [("t", (3, 2), 0)]


_LE = lambda n, size=8: n.to_bytes(size, "little")  # noqa: E731
# v3, no tensors, one kv: "k" = an array (9) of 2 strings (8), the first "a"; the second starts at byte 58
_STRINGS = b"GGUF" + _LE(3, 4) + _LE(0) + _LE(1) + _LE(1) + b"k" + _LE(9, 4) + _LE(8, 4) + _LE(2) + _LE(1) + b"a"


@pytest.mark.parametrize(
    "content, why",
    [
        (b"", "empty"),
        (b"GGML\x03\x00\x00\x00", "magic"),
        (b"GGUF", "truncated"),
        (b"GGUF\x01\x00\x00\x00" + b"\0" * 16, "version 1"),
        # one kv whose key claims 2^60 bytes, then an array of 2^60 u32
        (b"GGUF\x03\x00\x00\x00" + (0).to_bytes(8, "little") + (1).to_bytes(8, "little") + (1 << 60).to_bytes(8, "little"), "truncated"),
        (b"GGUF\x03\x00\x00\x00" + (0).to_bytes(8, "little") + (1).to_bytes(8, "little") + (1).to_bytes(8, "little") + b"k"
         + (9).to_bytes(4, "little") + (4).to_bytes(4, "little") + (1 << 60).to_bytes(8, "little"), "truncated"),
        # an array of 2 strings ("a", then one that claims 2^60 bytes), and one cut inside the second's length
        (_STRINGS + (1 << 60).to_bytes(8, "little"), "truncated string"),
        (_STRINGS + b"\x01\x00\x00", "truncated at byte 58"),
    ],
)  # fmt: skip
def test_not_a_readable_gguf(tmp_path, content, why):
    p = tmp_path / "x.gguf"
    p.write_bytes(content)
    with pytest.raises(GGUFHeaderError, match=why):
        read_header(str(p))
    assert gguf_context_length(str(p)) is None


def test_truncated_header(converted, tmp_path):
    p = tmp_path / "cut.gguf"
    p.write_bytes(converted.read_bytes()[:100_000])
    with pytest.raises(GGUFHeaderError, match="truncated"):
        read_header(str(p))
    # the context length sits before the vocabulary: read without it (a dry run reads it in ms, not 30)
    assert gguf_context_length(str(p)) == read_header(str(converted)).fields["llama.context_length"]
    p.write_bytes(converted.read_bytes()[:64])  # cut before the key
    assert gguf_context_length(str(p)) is None and gguf_context_length(str(tmp_path / "missing.gguf")) is None
