"""Serving metrics on hand-computed request timelines (the users' h2h definitions; their
recorded rows are reproduced in test_metrics_h2h.py)."""

from __future__ import annotations

import math

import pytest

from parity.metrics.registry import definitions, render_definitions
from parity.metrics.serving import METRICS, RequestRecord, compute, percentile
from parity.metrics.validity import check_request, noise_note, point_verdict


def rec(send, first, gap, tokens, gen=None, prompt=10, error=None, usage=None):
    times = [first + i * gap for i in range(tokens)] if first is not None else []
    r = RequestRecord(send=send, first=first, token_times=times, chunks=tokens, tokens=tokens, usage_tokens=tokens if usage is None else usage,
                      prompt_tokens=prompt, sent_prompt_tokens=prompt, expected_tokens=gen or tokens, error=error, finish_reason="length")  # fmt: skip
    return check_request(r)


def approx(x):
    return pytest.approx(x, rel=1e-4)  # rows keep 4 decimals


def test_two_requests_by_hand():
    # A: sent 0.0, first 0.1, 5 tokens every 0.1 -> last 0.5
    # B: sent 0.0, first 0.2, 5 tokens every 0.05 -> last 0.4
    m, why = compute([rec(0.0, 0.1, 0.1, 5), rec(0.0, 0.2, 0.05, 5)])
    assert why == {}
    assert m["gen_total"] == 10 and m["prompt_tok_total"] == 20
    assert m["wall_s"] == approx(0.5)
    assert m["agg_tps"] == approx(10 / 0.5)
    assert m["decode_window_s"] == approx(0.5 - 0.2)  # from the LAST first token to the end
    assert m["decode_agg_tps"] == approx(10 / 0.3)  # every generated token, as h2h counts them
    assert m["decode_perseq_tps"] == approx((4 / 0.4 + 4 / 0.2) / 2)
    assert m["prefill_tps"] == approx(20 / 0.2)  # prompt total / the longest TTFT
    assert m["ttft_mean_ms"] == approx(150) and m["ttft_max_ms"] == approx(200)
    assert m["ttft_p50_ms"] == approx(150)
    assert m["ttft_p99_ms"] == approx(100 + 100 * 0.99)
    assert m["tpot_ms"] == approx((100 + 50) / 2)
    assert m["itl_p50_ms"] == approx(75)  # gaps: 4x100, 4x50
    # steady decode: both decoding from 0.2 to 0.4 (B's end); tokens in (0.2, 0.4]: A 0.3, 0.4; B 0.25..0.4
    assert m["steady_decode_tps"] == approx(6 / 0.2)


def test_invalid_requests_say_why_and_are_not_averaged_in():
    good = rec(0.0, 0.1, 0.1, 5)
    short = rec(0.0, 0.05, 0.01, 3, gen=5)  # would inflate every metric if counted
    failed = rec(0.0, None, 0, 0, gen=5, error="HTTP 500: boom")
    lying = rec(0.0, 0.1, 0.1, 5, usage=32)
    assert good.valid and not short.valid and not failed.valid and not lying.valid
    assert "3 of 5 tokens" in short.invalid and "usage says 32" in lying.invalid
    row, _ = compute([r for r in (good, short, failed, lying) if r.valid])
    assert row == compute([good])[0]
    problems = point_verdict([good, short, failed, lying], row, min_window_s=0.0)
    assert problems == ["3/4 requests invalid (first: clamped: the stream carried 3 of 5 tokens and ended with finish_reason length (the engine cut max_tokens: prompt + max_tokens over its context?))"]
    assert point_verdict([good, short], row, min_window_s=0.0, tolerance=0.5) == []


def test_a_window_shorter_than_the_minimum_makes_the_point_invalid():
    r = rec(0.0, 0.01, 0.001, 5)
    row, _ = compute([r])
    wall, decode = point_verdict([r], row, min_window_s=0.5)
    assert wall.startswith("wall_s 14.0 ms is shorter than serving.min_window_s (500 ms)") and decode.startswith("decode_window_s 4.0 ms")
    assert any("decode_window_s" in x for x in point_verdict([r], row, min_window_s=0.012))


def test_prompt_token_mismatch_is_invalid():
    r = rec(0.0, 0.1, 0.1, 5, prompt=10)
    r.prompt_tokens = 11  # the server added a BOS we did not send
    assert "counted 11 prompt tokens, 10 were sent" in check_request(r).invalid


def test_empty_input_gives_reasons_not_nan():
    m, why = compute([])
    assert m["agg_tps"] is None and m["gen_total"] == 0 and why["agg_tps"] == "no request produced a token"


def test_fewer_than_three_repeats_have_no_known_noise():
    assert noise_note(2) == "noise unknown: 2 valid repeats (a verdict needs 3)" and noise_note(3) is None


def test_percentile_interpolates_like_numpy():
    v = [1.0, 2.0, 3.0, 4.0]
    assert percentile(v, 50) == 2.5 and percentile(v, 0) == 1 and percentile(v, 100) == 4
    assert percentile(v, 90) == pytest.approx(3.7)
    assert math.isnan(percentile([], 50))


def test_every_metric_is_declared_once_with_its_definition():
    defs = {d["name"]: d for d in definitions()}
    from parity.metrics.energy import ENERGY_METRICS
    from parity.metrics.workload import WORKLOAD_METRICS

    assert not set(METRICS) & set(WORKLOAD_METRICS) and not (set(METRICS) | set(WORKLOAD_METRICS)) & set(ENERGY_METRICS)  # one declaration per name
    assert set(defs) == set(METRICS) | set(WORKLOAD_METRICS) | set(ENERGY_METRICS) and all(d["formula"] and d["unit"] and d["better"] in ("higher", "lower") for d in defs.values())
    text = render_definitions(["decode_agg_tps"])
    assert text.startswith("decode_agg_tps [tok/s, higher is better]: gen_total / (last token arrival - LAST first-token arrival)")
