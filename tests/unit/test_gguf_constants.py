"""gguf's type table loaded without the gguf package (numpy and the reader stay unimported)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_table_is_the_packages():
    import gguf

    from parity.gguf import constants as gguf_constants

    sys.modules.pop(gguf_constants._NAME, None)
    real = {t.name: size for t, size in gguf.GGML_QUANT_SIZES.items()}
    alone = gguf_constants.constants()
    if alone is gguf.constants:  # the package was imported first: loading the file alone is what to test
        sys.modules.pop(gguf_constants._NAME, None)
        saved = sys.modules.pop("gguf.constants")
        try:
            alone = gguf_constants.constants()
        finally:
            sys.modules["gguf.constants"] = saved
    assert alone is not gguf.constants
    assert {t.name: size for t, size in alone.GGML_QUANT_SIZES.items()} == real and len(real) > 20


def test_bytes_per_token_imports_neither_numpy_nor_gguf(tmp_path):
    from parity.config import SynthSpec
    from parity.models.synth import synth_gguf

    model = tmp_path / "m.gguf"
    synth_gguf(model, SynthSpec(arch="qwen35moe", dtype="f16", layers=2, embd=64, heads=4, kv_heads=2, ff=64, ctx=512, experts=4, experts_used=2))
    code = (f"import sys; from parity.efficiency.bytes_per_token import decode_bytes; b = decode_bytes({str(model)!r}, 128, 2); "
            "print(b['total'] > 0, 'numpy' in sys.modules, 'gguf' in sys.modules)")  # fmt: skip
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert res.stdout.split() == ["True", "False", "False"], res.stderr
