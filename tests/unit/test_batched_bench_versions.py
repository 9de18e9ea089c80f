"""llama-batched-bench output of other builds (captured text under tests/data/bench)."""

from __future__ import annotations

from pathlib import Path


from parity.bench.batched_bench import missing_rows, parse, parse_header

DATA = Path(__file__).resolve().parent.parent / "data" / "bench"


def test_main_prefixed_header_table_rows():
    rows = parse((DATA / "batched-bench-gb10-main-prefix.stdout").read_text())
    assert len(rows) == 18 and rows[0] == {"pp": 512, "tg": 32, "b": 1, "n_kv": 544, "t_pp": 0.27, "s_pp": 1895.57, "t_tg": 0.399, "s_tg": 80.13, "t": 0.669, "s": 812.6}


def test_main_prefixed_header_gives_n_kv_max():
    """Without n_kv_max a row skipped for want of KV cells reads as 'lost at exit' and is retried."""
    text = (DATA / "batched-bench-gb10-main-prefix.stdout").read_text()
    header = parse_header(text)
    assert header["n_kv_max"] == 270336 and header["n_batch"] == 2048 and header["is_pp_shared"] == 0
    skipped, lost = missing_rows(parse(text), [8192], [32], [64], header)
    assert skipped == ["PP=8192 TG=32 B=64 (N_KV 526336 > n_kv_max 270336)"] and lost == []
