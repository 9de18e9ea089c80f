"""The capacity simulator (parity.capacity.simulator): its step-time model checked from first
principles on a probe small enough to add up by hand, the closed loop's schedule that does not
depend on the step times (so a lever scales every latency exactly), the drift shared by the
probes of one level, determinism, and the open loop."""

from __future__ import annotations

import math

import numpy as np
import pytest

from parity.capacity.probe import OPEN, PromptSet
from parity.capacity.simulator import Drift, ServerModel, Simulator, Workload

QUIET = Drift(0.0, 0.0)


def prompts(p, g, measured):
    return PromptSet(np.array(p), np.array(g), measured)


def test_one_client_adds_up_by_hand():
    m = ServerModel(step_ms=5.0, per_seq_ms=1.0, per_prefill_token_ms=0.01, chunk_tokens=100, step_jitter=0.0)
    sim = Simulator(m, QUIET)
    ps = prompts([250, 40, 10], [4, 3, 2], measured=2)  # two measured, one warm-up (index 2)
    r = sim("a", 1, 0, ps)
    # request 0: 250 prompt tokens in chunks of 100, 100, 50, each step with one request in it
    prefill0 = (5 + 1 + 1.0) + (5 + 1 + 1.0) + (5 + 1 + 0.5)
    prefill1 = 5 + 1 + 0.4
    decode = 5 + 1  # one request decoding, no prompt tokens
    assert r.ttft_ms.tolist() == pytest.approx([prefill0, prefill1])
    assert r.itl_ms.tolist() == pytest.approx([decode] * (3 + 2))  # 4 - 1 and 3 - 1 gaps
    assert r.tpot_ms.tolist() == pytest.approx([decode, decode])
    assert r.e2e_ms.tolist() == pytest.approx([prefill0 + 3 * decode, prefill1 + 2 * decode])
    assert r.sent == 4  # the warm-up, two measured, and one cool-down sent when request 0 ended
    assert len(r.ttft_ms) == 2


def test_a_closed_loop_schedule_is_the_same_for_any_step_time():
    m = ServerModel(step_jitter=0.0)
    ps = Workload().prompts(1, 0, 200, 64)
    sim = Simulator(m, QUIET, levers={"b": 1.03})
    a, b = sim("a", 48, 0, ps), sim("b", 48, 0, ps)
    for field in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
        assert np.allclose(getattr(b, field), 1.03 * getattr(a, field))
    assert b.sent == a.sent and b.output_tokens == a.output_tokens


def test_the_drift_of_one_level_is_shared_by_its_probes_and_the_next_level_has_its_own():
    m = ServerModel(step_jitter=0.0)
    ps = Workload().prompts(1, 0, 100, 32)
    sim = Simulator(m, Drift(shared=0.03, own=0.0), seed=5)
    a1, b1, b2, a2 = (sim(e, 32, 0, ps) for e in ("a", "b", "b", "a"))
    assert np.array_equal(a1.ttft_ms, b1.ttft_ms)  # the first pair: one factor
    assert np.array_equal(b2.ttft_ms, a2.ttft_ms)  # the second pair: another
    assert not np.allclose(a1.ttft_ms, a2.ttft_ms)
    ratio = a2.ttft_ms / a1.ttft_ms
    assert np.allclose(ratio, ratio[0]) and abs(math.log(ratio[0])) < 0.2  # one factor, of a few %


def test_seeded():
    ps = Workload().prompts(2, 3, 150, 40)
    one = [Simulator(seed=9)(e, 40, 3, ps).itl_ms for e in ("a", "b")]
    two = [Simulator(seed=9)(e, 40, 3, ps).itl_ms for e in ("a", "b")]
    other = Simulator(seed=10)("a", 40, 3, ps).itl_ms
    assert all(np.array_equal(x, y) for x, y in zip(one, two))
    assert not np.array_equal(one[0], other)


def test_the_measured_prompts_do_not_depend_on_the_warm_ups():
    w = Workload()
    a, b = w.prompts(1, 4, 100, 10), w.prompts(1, 4, 100, 90)
    assert np.array_equal(a.prompt_tokens[:100], b.prompt_tokens[:100])
    assert np.array_equal(a.gen_tokens[:100], b.gen_tokens[:100])
    assert a.warmup == 10 and b.warmup == 90
    assert w.prompt_min <= a.prompt_tokens.min() and a.prompt_tokens.max() <= w.prompt_max


def test_more_clients_more_throughput_then_slower_users_and_longer_gaps():
    sim = Simulator(ServerModel(), QUIET)
    ps = Workload().prompts(1, 0, 300, 128)
    rs = [sim("a", c, 0, ps) for c in (4, 16, 64, 128)]
    tp = [r.throughput_tps for r in rs]
    assert tp[0] < tp[1] < tp[2]
    assert [r.user_tps for r in rs] == sorted((r.user_tps for r in rs), reverse=True)
    assert [np.percentile(r.itl_ms, 99) for r in rs] == sorted(np.percentile(r.itl_ms, 99) for r in rs)
    for c, r in zip((4, 16, 64, 128), rs):
        assert len(r.ttft_ms) == 300 and len(r.itl_ms) == int((ps.gen_tokens[:300] - 1).sum())
        assert r.sent >= 300 + c


def test_open_loop_queues_past_saturation():
    sim = Simulator(ServerModel(), QUIET, mode=OPEN)
    ps = Workload().prompts(1, 0, 200, 40)
    low, high = sim("a", 4.0, 0, ps), sim("a", 40.0, 0, ps)
    assert len(low.ttft_ms) == len(high.ttft_ms) == 200
    assert np.median(high.ttft_ms) > 10 * np.median(low.ttft_ms)  # past saturation the queue grows
    assert low.sent >= 240  # warm-ups first
    with pytest.raises(ValueError, match="rate > 0"):
        sim("a", 0.0, 0, ps)
