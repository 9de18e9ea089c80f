"""Calibrated built-in workloads, on the requests of real smoke runs whose windows fell short
(tests/data/workloads: prefill-under-decode's decode window 310 ms, multi-turn's 307 ms, of
min_window_s 500 ms)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from parity.metrics import validity
from parity.metrics.serving import RequestRecord, compute
from parity.results.model import PointRow
from parity.workloads import WORKLOADS
from parity.workloads.calibration import basis, caps, need_of, why_off
from parity.stats.calibrate import choose, needed_gen, stream_need

DATA = Path(__file__).parent.parent / "data" / "workloads"


def records(name: str) -> list[RequestRecord]:
    recs = []
    for d in json.loads((DATA / name).read_text()):
        d = {k: v for k, v in d.items() if k != "valid"}
        recs.append(validity.check_request(RequestRecord(**d)))
    return recs


def pud():
    recs = records("smoke-pud-paged-r0.json")
    return recs, [r for r in recs if r.expected_tokens == 384]  # the decode streams (decode_gen 384; the long prompts gen 32)


def window_at(b: dict, w: str, tokens: int, pace: float) -> float:
    """The window a stream of `tokens` at `pace` ends, by the basis's lead."""
    return b["lead_s"][w] + (tokens - 1) * pace


def test_the_basis_reproduces_the_recorded_windows_of_a_real_prefill_under_decode_point():
    recs, decode = pud()
    metrics, _ = compute([r for r in recs if r.valid])
    assert (metrics["wall_s"], metrics["decode_window_s"]) == (0.843, 0.3102)  # as its summary.json row recorded
    b = basis("prefill-under-decode", recs, decode, WORKLOADS["prefill-under-decode"].windows)
    assert b["knob"] == "decode_gen" and b["tokens"] == 384
    assert 0.002 < b["pace_s"] < 0.0025  # 2.18 ms a token: 384 tokens in 0.83 s
    # the decode window starts after the decode streams' first tokens (the last long prompt's first token)
    assert b["lead_s"]["decode_window_s"] < -0.5 < 0 < b["lead_s"]["wall_s"]
    for w in ("wall_s", "decode_window_s"):
        assert window_at(b, w, 384, b["pace_s"]) == pytest.approx(metrics[w], abs=1e-3)


def test_the_raised_decode_gen_keeps_the_window_above_min_window_s_at_margin_times_the_pace():
    recs, decode = pud()
    row = {"engine": "paged", "n": 2, "point": "2 streams + 2 x 320-token prompts", "repeat": 0, "wall_s": 0.843, "decode_window_s": 0.3102,
           "calibration_basis": basis("prefill-under-decode", recs, decode, WORKLOADS["prefill-under-decode"].windows)}  # fmt: skip
    cal = choose([row], 384, 0.5, 1.5, {"paged": (1984, "slot")}, 4096, need_of=need_of(0.5, 1.5), knob="decode_gen")
    assert not cal.kept_trial and not cal.capped and cal.trial_gen == 384 and cal.gen == cal.need
    assert cal.line().startswith("calibration: decode_gen 384 -> ") and cal.shortest == "paged 2 streams + 2 x 320-token prompts"
    b = row["calibration_basis"]
    assert window_at(b, "decode_window_s", cal.gen, b["pace_s"] / 1.5) >= 0.5  # still long enough with a stream 1.5x faster
    assert window_at(b, "decode_window_s", cal.gen - 1, b["pace_s"] / 1.5) < 0.5  # and no longer than that needs
    # the sweep's proportional rule reads the window's 0.31 s over 383 gaps as the pace (0.8 ms, not
    # the stream's 2.2 ms: the window starts 0.52 s into the stream) and would ask for more
    assert cal.gen < needed_gen(384, 0.3102, 0.75)


def test_a_cap_keeps_decode_gen_within_the_slot_and_says_so():
    recs, decode = pud()
    row = {"engine": "paged", "n": 2, "point": "p", "calibration_basis": basis("prefill-under-decode", recs, decode, WORKLOADS["prefill-under-decode"].windows)}
    cal = choose([row], 384, 0.5, 1.5, {"paged": (448, "engine paged's 512-token request context less 64 prompt tokens")}, 4096, need_of=need_of(0.5, 1.5), knob="decode_gen")
    assert cal.gen == 448 and cal.capped and "needs decode_gen" in cal.warning() and "512-token" in cal.warning()


def test_multi_turn_gen_from_a_real_second_turn():
    recs = records("smoke-mt-turn2-stock-r0.json")
    metrics, _ = compute([r for r in recs if r.valid])
    assert (metrics["wall_s"], metrics["decode_window_s"]) == (0.3336, 0.3074)
    b = basis("multi-turn", recs, [], WORKLOADS["multi-turn"].windows)
    assert b["knob"] == "gen" and b["tokens"] == 162 and 0 <= b["lead_s"]["decode_window_s"] < 0.05
    need = need_of(0.5, 1.5)(PointRow(engine="stock", n=1, info={"calibration_basis": b}))
    assert need["decode_window_s"] >= need["wall_s"] > 162
    assert window_at(b, "decode_window_s", need["decode_window_s"], b["pace_s"]) >= 0.75


def test_stream_need_is_the_sweep_rule_when_the_window_starts_at_the_first_token():
    # decode window: 255 gaps in 0.45 s; its start is the last first token (lead 0)
    assert stream_need(0.0, 0.45 / 255, 0.5, 1.5) == needed_gen(256, 0.45, 0.75) == 426
    assert stream_need(None, 0.001, 0.5, 1.5) is None and stream_need(0.0, 0.0, 0.5, 1.5) is None
    assert stream_need(5.0, 0.001, 0.5, 1.5) == 2  # a window already long by its lead alone


def test_caps_per_kind_leave_room_for_what_else_a_request_carries():
    plan = SimpleNamespace(engines=["a", "b"], limits={"a": 2048, "b": 1024}, limit_what={"a": "slots", "b": "max_model_len"})
    wl = lambda kind, **c: SimpleNamespace(kind=kind, ptok=64, cfg=SimpleNamespace(**c))  # noqa: E731
    assert caps(plan, wl("prefill-under-decode"))["b"][0] == 1024 - 64
    assert caps(plan, wl("shared-prefix", prefix_tokens=128, suffix_tokens=16))["a"][0] == 2048 - 144
    assert caps(plan, wl("multi-turn", turns=2, turn_tokens=64))["a"][0] == int(2048 / 3) - 64  # the history is resent as text


@pytest.mark.parametrize(
    ("sized", "builtin", "gen_given", "over", "why"),
    [
        (("gen", "turns"), True, False, {}, None),
        (("turns",), True, False, {}, "gen set in YAML or --workload-opt"),
        ((), False, False, {}, "a declared workload keeps its shapes"),
        (("gen",), True, True, {}, "--gen given"),
        (("gen",), True, False, {"order": "aabb"}, "--order aabb has no trial block"),
        (("gen",), True, False, {"min_window_s": 0}, "min_window_s 0"),
        (("gen",), True, False, {"enabled": False}, "serving.calibrate.enabled false"),
    ],
)
def test_why_the_trial_may_not_raise_a_field(sized, builtin, gen_given, over, why):
    s = SimpleNamespace(order=over.get("order", "abab"), min_window_s=over.get("min_window_s", 0.5), calibrate=SimpleNamespace(enabled=over.get("enabled", True)))
    wl = SimpleNamespace(kind="multi-turn", sized=sized, builtin=builtin, gen=256, cfg=SimpleNamespace())
    assert WORKLOADS["multi-turn"].knob == "gen" and why_off(s, wl, gen_given) == why


def test_a_stream_that_came_in_one_read_is_paced_by_its_whole_request():
    recs = records("smoke-mt-turn2-stock-r0.json")
    b = basis("multi-turn", recs, [], WORKLOADS["multi-turn"].windows)
    assert b["burst"] is False and b["reads"] > 80  # the real stream: about one read a token
    last = max(recs, key=lambda r: r.end)
    last.token_times = [last.first] + [last.end] * (last.tokens - 1)  # the same request, its tokens after the first read at once
    b = basis("multi-turn", recs, [], WORKLOADS["multi-turn"].windows)
    assert b["burst"] is True and b["reads"] == 1 and b["pace_s"] == pytest.approx((last.end - last.send) / last.tokens, abs=1e-9)
