"""Bytes per decode step on models quantized by the built llama-quantize (the smoke profile's
stock engine builds it), against the file's own tensor sizes: Q8_0 and Q4_0 of the tiny MoE,
whose routed experts count by the share of experts a step touches."""

from __future__ import annotations

import os
import subprocess

import pytest

from parity.efficiency.bytes_per_token import decode_bytes
from parity.models.synth import synth_gguf
from tests.unit.test_efficiency_bytes import MOE, LLAMA, independent_weights


@pytest.mark.slow
@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_0"])
def test_llama_quantize_models(engine_bins, tmp_path, qtype):
    tool = engine_bins["stock"] / "llama-quantize"
    assert tool.is_file(), "the smoke profile's stock engine builds llama-quantize"
    for name, spec in (("moe", MOE), ("llama", LLAMA)):
        src, out = tmp_path / f"{name}.gguf", tmp_path / f"{name}-{qtype}.gguf"
        synth_gguf(src, spec)
        r = subprocess.run([str(tool), str(src), str(out), qtype], capture_output=True, text=True, timeout=300,
                           env={**os.environ, "LD_LIBRARY_PATH": str(tool.parent)})  # fmt: skip
        assert r.returncode == 0, r.stderr[-2000:]
        assert out.stat().st_size < src.stat().st_size  # really quantized
        for n in (1, 4):
            got = decode_bytes(str(out), 10, n_seqs=n)["weights"]
            assert got == pytest.approx(independent_weights(out, n), abs=1), (name, qtype, n)
