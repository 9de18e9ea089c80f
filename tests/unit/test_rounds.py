"""A point's rounds (parity.serving.rounds): how many, and how a round-level metric is the mean over
the rounds while a per-request one is over every request."""

from __future__ import annotations

import pytest

from parity.loadgen.record import RequestRecord
from parity.metrics.serving import compute
from parity.serving.rounds import count, metrics, split, window_reads


@pytest.mark.parametrize("n, min_requests, rounds", [(1, 8, 8), (4, 8, 2), (3, 8, 3), (8, 8, 1), (32, 8, 1), (1, 1, 1), (2, 0, 1)])
def test_rounds_cover_min_requests(n, min_requests, rounds):
    assert count(n, min_requests) == rounds and split(list(range(n * rounds)), n) == [list(range(i, i + n)) for i in range(0, n * rounds, n)]


def _rec(send, first, gaps, ptok=32):
    times = [first]
    for g in gaps:
        times.append(times[-1] + g)
    return RequestRecord(send=send, first=first, token_times=times, chunks=len(times), tokens=len(times), usage_tokens=len(times),
                         prompt_tokens=ptok, sent_prompt_tokens=ptok, expected_tokens=len(times))  # fmt: skip


def test_round_metrics_are_the_mean_of_rounds_request_metrics_span_every_request():
    # two rounds of two requests: the second round is twice as slow
    r0 = [_rec(0.0, 0.010, [0.01] * 3), _rec(0.0, 0.012, [0.01] * 3)]
    r1 = [_rec(1.0, 1.020, [0.02] * 3), _rec(1.0, 1.024, [0.02] * 3)]
    row, why = metrics([r0, r1])
    a, _ = compute(r0)
    b, _ = compute(r1)
    for name in ("wall_s", "agg_tps", "decode_agg_tps", "prefill_tps", "ttft_max_ms", "gen_total", "decode_window_s"):
        assert row[name] == pytest.approx((a[name] + b[name]) / 2, rel=1e-3), name
    assert row["gen_total"] == 8 and isinstance(row["gen_total"], int)  # one round's tokens, as the users' point has
    every, _ = compute(r0 + r1)
    for name in ("ttft_mean_ms", "ttft_p99_ms", "decode_perseq_tps", "tpot_ms"):
        assert row[name] == every[name], name
    assert row["ttft_mean_ms"] == pytest.approx((10 + 12 + 20 + 24) / 4)
    assert window_reads([r0, r1]) == 6 and metrics([r0]) == compute(r0)


def test_a_round_without_a_value_leaves_the_point_without_it():
    burst = [_rec(1.0, 1.020, [0.0] * 3), _rec(1.0, 1.020, [0.0] * 3)]  # every token of the round in one read
    row, why = metrics([[_rec(0.0, 0.010, [0.01] * 3)], burst])
    assert row["decode_agg_tps"] is None and why["decode_agg_tps"].startswith("round 1: ")
