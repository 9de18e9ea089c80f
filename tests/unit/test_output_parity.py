"""Cross-engine output parity on hand-made traces."""

from __future__ import annotations

import math

import pytest

from parity.metrics.output_parity import Trace, compare, shared_kl, verdict


def lp(*ps):
    return [math.log(p) for p in ps]


def test_identical_traces_agree_with_zero_kl():
    top = [dict(zip([1, 2, 3], lp(0.7, 0.2, 0.1)))] * 3
    r = compare(Trace([1, 1, 1], top), Trace([1, 1, 1], top))
    assert r["agreement"] == 1.0 and r["first_divergence"] is None and r["kl_mean"] == 0 and r["kl_positions"] == 3
    assert verdict(r, 1.0, 0.01)[0] == "pass"


def test_divergence_stops_the_token_count_and_the_kl_window():
    a = [{5: math.log(0.6), 6: math.log(0.4)}] * 4
    b = [{5: math.log(0.45), 6: math.log(0.55)}] * 4  # a different distribution at every position
    r = compare(Trace([5, 5, 5, 5], a), Trace([5, 5, 6, 6], b))
    assert r["first_divergence"] == 2 and r["agreement"] == 0.5
    assert r["kl_positions"] == 3  # positions 0..2: the context is still the same at the diverging one
    expected = 0.6 * math.log(0.6 / 0.45) + 0.4 * math.log(0.4 / 0.55)
    assert r["kl_mean"] == pytest.approx(expected, rel=1e-5)
    v, why = verdict(r, 1.0, 1.0)
    assert v == "fail" and "first divergence at token 2" in why


def test_kl_is_over_the_shared_top_k_renormalized():
    p = {1: math.log(0.5), 2: math.log(0.3), 3: math.log(0.2)}
    q = {1: math.log(0.5), 2: math.log(0.3), 4: math.log(0.2)}
    assert shared_kl(p, q) == pytest.approx(0.0, abs=1e-12)  # 1 and 2 in the same proportion
    assert shared_kl({1: 0.0}, {2: 0.0}) is None


def test_a_shorter_answer_diverges_where_it_ends():
    r = compare(Trace([1, 2, 3]), Trace([1, 2]))
    assert r["first_divergence"] == 2 and r["agreement"] == pytest.approx(0.6667, abs=1e-4)
    assert verdict(r, 0.5, 1.0) == ("fail", "no position where both top-k lists share a token: KL cannot be computed")
