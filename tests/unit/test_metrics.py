"""Serving metrics on hand-computed request timelines."""

from __future__ import annotations

import math

import pytest

from parity.serving.metrics import METRICS, RequestRecord, compute, definitions, percentile, render_definitions


def rec(send, first, gap, tokens, gen=None, prompt=10, error=None):
    arrivals = [first + i * gap for i in range(tokens)] if first is not None else []
    return RequestRecord(send=send, first=first, arrivals=arrivals, prompt_tokens=prompt, completion_tokens=tokens, expected_tokens=gen or tokens, sent_prompt_tokens=prompt, error=error)


def test_two_requests_by_hand():
    # A: sent 0.0, first 0.1, 5 tokens every 0.1 -> last 0.5
    # B: sent 0.0, first 0.2, 5 tokens every 0.05 -> last 0.4
    rs = [rec(0.0, 0.1, 0.1, 5), rec(0.0, 0.2, 0.05, 5)]
    m = compute(rs)
    assert m["wall_s"] == pytest.approx(0.5)
    assert m["agg_tps"] == pytest.approx(10 / 0.5)
    assert m["decode_agg_tps"] == pytest.approx(4 / 0.4 + 4 / 0.2)
    assert m["prefill_tps"] == pytest.approx(20 / 0.2)
    assert m["ttft_mean_ms"] == pytest.approx(150)
    assert m["ttft_p50_ms"] == pytest.approx(150)
    assert m["ttft_p99_ms"] == pytest.approx(100 + 100 * 0.99)
    assert m["tpot_ms"] == pytest.approx((100 + 50) / 2)
    assert m["itl_p50_ms"] == pytest.approx(75)  # gaps: 4x100, 4x50
    assert m["requests"] == 2 and m["valid_requests"] == 2 and m["short_requests"] == 0


def test_short_and_failed_requests_are_not_averaged_in():
    good = rec(0.0, 0.1, 0.1, 5)
    short = rec(0.0, 0.05, 0.01, 3, gen=5)  # would inflate every metric if counted
    failed = rec(0.0, None, 0, 0, gen=5, error="HTTP 500: boom")
    m = compute([good, short, failed])
    assert m == {**compute([good]), "requests": 3, "valid_requests": 1, "short_requests": 1, "failed_requests": 1}
    assert not short.valid and short.short and not failed.short


def test_server_timings_are_reported_next_to_the_client_view():
    r = rec(0.0, 0.1, 0.1, 5)
    r.server_timings = {"predicted_per_second": 12.5, "prompt_per_second": 400.0, "predicted_per_token_ms": 80.0}
    m = compute([r])
    assert (m["server_decode_tps_per_req_mean"], m["server_prefill_tps_per_req_mean"], m["server_tpot_ms_mean"]) == (12.5, 400.0, 80.0)


def test_prompt_token_mismatch_is_counted():
    r = rec(0.0, 0.1, 0.1, 5, prompt=10)
    r.prompt_tokens = 11  # the server added a BOS we did not send
    assert compute([r])["prompt_tokens_mismatch"] == 1


def test_empty_input_gives_none_not_nan():
    m = compute([])
    assert m["agg_tps"] is None and m["requests"] == 0


def test_percentile_interpolates_like_numpy():
    v = [1.0, 2.0, 3.0, 4.0]
    assert percentile(v, 50) == 2.5 and percentile(v, 0) == 1 and percentile(v, 100) == 4
    assert percentile(v, 90) == pytest.approx(3.7)
    assert math.isnan(percentile([], 50))


def test_every_metric_is_declared_once_with_its_definition():
    defs = {d["name"]: d for d in definitions()}
    assert set(defs) == set(METRICS) and all(d["formula"] and d["unit"] and d["better"] in ("higher", "lower") for d in defs.values())
    text = render_definitions(["decode_agg_tps"])
    assert text.startswith("decode_agg_tps [tok/s, higher is better]: sum over requests")
