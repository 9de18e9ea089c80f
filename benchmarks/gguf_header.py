"""CPU seconds to read a GGUF's header: parity.gguf.header against gguf's GGUFReader,
median of N reads each.  Target: < 0.25 s for a 32k-token vocabulary (GGUFReader: ~3 s).

    python benchmarks/gguf_header.py [--model PATH] [--runs 5] [--json]

Default model: the smoke profile's tiny-hf GGUF in the cache (convert_hf_to_gguf.py output,
32k tokens) when `make smoke` has made it; else the captured header under tests/data/gguf,
which only parity can read (GGUFReader wants the tensor data too).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 0.25
ROOT = Path(__file__).resolve().parents[1]
CAPTURED = ROOT / "tests" / "data" / "gguf" / "hf-tiny-s0.f32.header.gguf.gz"


def cpu_seconds(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="a GGUF file (default: see the module docstring)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from parity.gguf.header import read_header

    path, full = a.model, True
    if path is None:
        cached = Path(os.environ.get("PARITY_CACHE", Path.home() / ".cache" / "parity")) / "models" / "hf-tiny-s0.f32.gguf"
        if cached.is_file():
            path = str(cached)
        else:
            tmp = tempfile.NamedTemporaryFile(suffix=".gguf", delete=False)
            tmp.write(gzip.decompress(CAPTURED.read_bytes()))
            tmp.close()
            path, full = tmp.name, False
    h = read_header(path)
    doc = {"model": path, "tokens": len(h.fields.get("tokenizer.ggml.tokens") or []), "tensors": len(h.tensors), "runs": a.runs,
           "parity_cpu_s": round(cpu_seconds(lambda: read_header(path), a.runs), 4), "target_s": TARGET_S}  # fmt: skip
    if full:
        from gguf import GGUFReader

        doc["gguf_reader_cpu_s"] = round(cpu_seconds(lambda: GGUFReader(path), a.runs), 4)
    else:
        doc["gguf_reader_cpu_s"] = None
    doc["ok"] = doc["parity_cpu_s"] < TARGET_S
    if not full:
        os.unlink(path)
    if a.json:
        print(json.dumps(doc))
    else:
        other = f"; GGUFReader {doc['gguf_reader_cpu_s']} s" if full else " (header only: GGUFReader not run)"
        print(f"gguf header read: {doc['parity_cpu_s']} CPU-s median of {a.runs} ({doc['tokens']} tokens, {doc['tensors']} tensors){other}; "
              f"target < {TARGET_S} s: {'ok' if doc['ok'] else 'OVER'}")  # fmt: skip
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
