"""parity's headline metrics are the users' h2h definitions: computed from request records
shaped like theirs (tests/data/h2h, see make_records.py), they reproduce the rows the users
recorded, at the precision the users printed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from parity.serving.metrics import METRICS, RequestRecord, compute

DATA = Path(__file__).resolve().parents[1] / "data" / "h2h"

# the users' own rows (docs/GB10_PARITY_PHASE0_RESULTS.md, Phases 52 and 56)
RECORDED = {
    "dense": {"gen_total": 8192, "prompt_tok_total": 22785, "agg_tps": 139.0, "decode_agg_tps": 360.5, "decode_perseq_tps": 1.93,
              "prefill_tps": 629.5, "ttft_mean_ms": 23171.5, "ttft_max_ms": 36195.3, "wall_s": 58.921},
    "moe": {"gen_total": 8191, "prompt_tok_total": 17793, "agg_tps": 341.1, "decode_agg_tps": 651.2, "decode_perseq_tps": 3.93,
            "prefill_tps": 1555.9, "ttft_mean_ms": 7168.1, "ttft_max_ms": 11435.5, "wall_s": 24.015},
}  # fmt: skip


def load(name: str) -> list[RequestRecord]:
    out = []
    for r in json.loads((DATA / f"{name}.json").read_text()):
        n = r["tokens"]
        times = [r["first"] + (r["end"] - r["first"]) * i / (n - 1) for i in range(n)]
        out.append(RequestRecord(send=r["send"], first=r["first"], token_times=times, chunks=n, tokens=n, usage_tokens=n,
                                 prompt_tokens=r["prompt_tokens"], sent_prompt_tokens=r["prompt_tokens"], expected_tokens=64))  # fmt: skip
    return out


def printed(value: float, like) -> float:
    """Round as the users printed: as many decimals as their number shows."""
    text = repr(like)
    return round(value, len(text.split(".")[1]) if "." in text else 0)


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_users_rows_reproduced(name):
    row, why = compute(load(name))
    assert why == {}
    for metric, want in RECORDED[name].items():
        assert printed(row[metric], want) == want, metric


def test_decode_agg_is_not_a_sum_of_per_request_rates():
    recs = load("dense")
    row, _ = compute(recs)
    summed = sum((r.tokens - 1) / (r.end - r.first) for r in recs)  # what parity computed before
    assert summed > 200 and abs(summed - row["decode_agg_tps"]) > 50
    assert row["decode_perseq_tps"] == pytest.approx(summed / len(recs), rel=1e-6)


def test_one_read_gives_a_reason_not_an_empty_cell():
    r = RequestRecord(send=0.0, first=0.5, token_times=[0.5] * 32, chunks=1, tokens=32, expected_tokens=32, prompt_tokens=8)
    row, why = compute([r])
    assert row["wall_s"] == 0.5 and row["agg_tps"] == 64.0 and row["prefill_tps"] == 16.0
    assert row["decode_agg_tps"] is None and "one read" in why["decode_agg_tps"]
    assert row["decode_perseq_tps"] is None and why["decode_perseq_tps"]


def test_merged_chunk_tokens_share_the_gap():
    r = RequestRecord(send=0.0, first=1.0, token_times=[1.0, 1.1, 1.4, 1.4, 1.4], chunks=3, tokens=5, expected_tokens=5, prompt_tokens=4)
    from parity.serving.metrics import itl_ms

    assert itl_ms([r]) == pytest.approx([100.0, 100.0, 100.0, 100.0])


def test_every_metric_has_a_formula_and_direction():
    for m in METRICS.values():
        assert m.formula and m.better in ("higher", "lower") and m.unit
