"""Blocks of a sweep: the order of each block (extendable), the stop loop with a fake
block runner and a fake clock, the half-widths it stops on, and the budget's checks."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from parity.config import load_profile
from parity.errors import UsageError
from parity.metrics.registry import direction
from parity.stats.blocks import block_line, block_order, half_widths, run_blocks
from parity.serving.snapshot import SnapshotRequest, make_budget, run_order
from parity.stats.adaptive import FIXED, MAX_REPEATS, TIME_BUDGET, UNTIL_CI, Budget
from parity.workloads import WORKLOADS


def workload(kind: str) -> SimpleNamespace:
    return SimpleNamespace(kind=kind, kind_obj=WORKLOADS[kind])


def test_block_order_keeps_the_rotation_past_the_planned_repeats():
    assert block_order(["a", "b"], 0, "abab") == ["a", "b"] == block_order(["a", "b"], 7, "abab")
    assert [block_order(["a", "b"], r, "abba") for r in range(4)] == [["a", "b"], ["b", "a"]] * 2
    assert [block_order(["a", "b", "c"], r, "abba") for r in range(4)] == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
    with pytest.raises(ValueError):
        block_order(["a", "b"], 0, "aabb")


@pytest.mark.parametrize("order", ["abab", "abba"])
def test_run_order_is_the_blocks_in_sequence_so_extending_it_is_generating_more_blocks(order):
    eng = ["p", "s", "v"]
    assert run_order(eng, 5, order) == [(r, e) for r in range(5) for e in block_order(eng, r, order)]
    assert run_order(eng, 3, order) == run_order(eng, 5, order)[:9]


def test_run_order_aabb_is_unchanged():
    assert run_order(["a", "b"], 2, "aabb") == [(0, "a"), (1, "a"), (0, "b"), (1, "b")]


class Fake:
    """A block runner whose half-widths shrink as 1/sqrt(blocks); each block takes block_s on a fake clock."""

    def __init__(self, hw0=6.0, block_s=10.0, trial=False):
        self.hw0, self.block_s, self.trial, self.t, self.ran = hw0, block_s, trial, 0.0, []

    def clock(self):
        return self.t

    def run(self, b):
        self.ran.append(b)
        self.t += self.block_s
        return not (self.trial and b == 0)

    def widths(self):
        n = len(self.ran) - (1 if self.trial else 0)
        return {"p N=1 decode_agg_tps": None if n < 2 else self.hw0 / n**0.5, "p N=1 ttft_mean_ms": None if n < 2 else self.hw0 / 2 / n**0.5}


def test_fixed_budget_runs_exactly_repeat_blocks():
    f = Fake()
    rule, why, blocks, secs = run_blocks(Budget(None, 3, 3), f.run, f.widths, clock=f.clock)
    assert (rule, blocks, f.ran, secs) == (FIXED, 3, [0, 1, 2], 30.0)


def test_until_ci_adds_blocks_until_every_half_width_is_narrow():
    f, seen = Fake(hw0=6.0), []
    rule, why, blocks, _ = run_blocks(Budget(2.0, 3, 20), f.run, f.widths, lambda *a: seen.append(a), clock=f.clock)
    assert rule == UNTIL_CI and blocks == 9 and f.ran == list(range(9))  # 6 / sqrt(9) = 2.0
    assert [s[1] for s in seen] == list(range(1, 10)) and seen[-1][3][0] == UNTIL_CI and all(s[3] is None for s in seen[:-1])


def test_until_ci_never_stops_before_the_minimum_even_when_narrow():
    f = Fake(hw0=0.1)
    assert run_blocks(Budget(2.0, 4, 20), f.run, f.widths, clock=f.clock)[:3:2] == (UNTIL_CI, 4)


def test_max_repeats_ends_a_run_that_stays_wide():
    f = Fake(hw0=100.0)
    rule, why, blocks, _ = run_blocks(Budget(1.5, 3, 5), f.run, f.widths, clock=f.clock)
    assert (rule, blocks) == (MAX_REPEATS, 5) and "decode_agg_tps" in why


def test_time_budget_stops_before_a_block_that_would_pass_it():
    f = Fake(hw0=100.0, block_s=10.0)
    rule, why, blocks, secs = run_blocks(Budget(1.5, 3, 20, max_seconds=45), f.run, f.widths, clock=f.clock)
    assert (rule, blocks, secs) == (TIME_BUDGET, 4, 40.0)


def test_a_calibration_trial_block_is_neither_a_block_nor_measured_time():
    f = Fake(trial=True)
    rule, _, blocks, secs = run_blocks(Budget(None, 3, 3), f.run, f.widths, clock=f.clock)
    assert (rule, blocks, f.ran, secs) == (FIXED, 3, [0, 1, 2, 3], 30.0)


def test_only_block_0_may_be_a_trial():
    ran = []
    out = run_blocks(Budget(None, 2, 2), lambda b: ran.append(b) or False, dict)
    assert out[2] == 2 and ran == [0, 1, 2]


def rows_for(values: dict) -> list[dict]:
    """values: {(engine, repeat): decode_agg_tps}; ttft mirrors it."""
    return [{"engine": e, "n": 1, "repeat": r, "decode_agg_tps": v, "ttft_mean_ms": 1000 / v, "valid": True} for (e, r), v in values.items()]


def test_half_widths_are_the_paired_conservative_ones_per_engine_point_metric():
    rows = rows_for({("s", 0): 100, ("p", 0): 101, ("s", 1): 100, ("p", 1): 103, ("s", 2): 100, ("p", 2): 102})
    hw = half_widths(rows, "s", ["decode_agg_tps", "ttft_mean_ms"], 2.0, 0.95, direction)
    assert set(hw) == {"p N=1 decode_agg_tps", "p N=1 ttft_mean_ms"} and all(v > 0 for v in hw.values())
    from parity.stats.paired import paired

    direct = paired({0: 100, 1: 100, 2: 100}, {0: 101, 1: 103, 2: 102})
    assert hw["p N=1 decode_agg_tps"] == pytest.approx(direct.stop_half_width_pct, rel=1e-5)


def test_half_widths_skip_invalid_rows_and_say_none_until_two_blocks():
    rows = rows_for({("s", 0): 100, ("p", 0): 101, ("s", 1): 100, ("p", 1): 103})
    rows[3]["valid"] = False
    assert half_widths(rows, "s", ["decode_agg_tps"], 2.0, 0.95, direction) == {"p N=1 decode_agg_tps": None}
    assert half_widths(rows, None, ["decode_agg_tps"], 2.0, 0.95, direction) == {}


def test_block_line_names_the_widest_and_the_rule():
    b = Budget(1.5, 3, 20)
    line = block_line(3, 4, {"p N=1 a": 2.5, "p N=4 a": 0.7}, None, b)
    assert line.startswith("block 3 done (4 measured): widest +-2.50% (p N=1 a), 1/2 over 1.5%; next block")
    assert "stop: until-ci: why" in block_line(3, 4, {"x": 1.0}, ("until-ci", "why"), b)
    assert "no interval yet" in block_line(0, 1, {"x": None}, None, b)
    assert "widest +->1000% (x)" in block_line(1, 2, {"x": 7.5e49}, None, b)


def budget_for(req: SnapshotRequest, repeat=3, engines=("p", "s"), order="abab", stats=None, workload=None):
    prof = load_profile("smoke")
    if stats:
        for k, v in stats.items():
            setattr(prof.stats, k, v)
    plan = SimpleNamespace(repeat=repeat, engines=list(engines), reference="s" if len(engines) > 1 else None, shape=SimpleNamespace(order=order))
    return make_budget(prof.stats, req, plan, workload)


def test_budget_fixed_by_default_adaptive_with_until_ci():
    assert budget_for(SnapshotRequest()) == Budget(None, 3, 3)
    assert budget_for(SnapshotRequest(until_ci=1.5)) == Budget(1.5, 3, 20, 7200.0)  # stats.budget_s bounds it by default
    assert budget_for(SnapshotRequest(until_ci=1.5), repeat=1) == Budget(1.5, 2, 20, 7200.0)  # an interval needs 2
    assert budget_for(SnapshotRequest(until_ci=3, max_repeats=8, budget_s=600)) == Budget(3.0, 3, 8, 600)
    assert budget_for(SnapshotRequest(), stats={"until_ci_pct": 2.0, "max_repeats": 10, "budget_s": 100.0}) == Budget(2.0, 3, 10, 100.0)


@pytest.mark.parametrize(
    "req,kw,message",
    [
        (SnapshotRequest(until_ci=0), {}, "--until-ci must be a positive number"),
        (SnapshotRequest(until_ci=-2.0), {}, "--until-ci must be a positive number"),
        (SnapshotRequest(until_ci=float("nan")), {}, "--until-ci must be a positive number"),
        (SnapshotRequest(until_ci=2, budget_s=0), {}, "--budget-s must be a positive number"),
        (SnapshotRequest(until_ci=2, max_repeats=0), {}, "--max-repeats must be a positive integer"),
        (SnapshotRequest(until_ci=2, max_repeats=2), {}, "--max-repeats 2 is below the minimum of 3 blocks"),
        (SnapshotRequest(max_repeats=5), {}, "give --until-ci PCT too"),
        (SnapshotRequest(budget_s=60), {}, "give --until-ci PCT too"),
        (SnapshotRequest(until_ci=2), {"engines": ("s",)}, "needs two engines"),
        (SnapshotRequest(until_ci=2), {"order": "aabb"}, "--order aabb has none"),
        (SnapshotRequest(until_ci=2), {"workload": workload("open-loop")}, "a workload has its own points"),
        (SnapshotRequest(until_ci=2), {"workload": workload("trace")}, "names what it waits on: METRIC=PCT"),
        (SnapshotRequest(until_ci="tpot_mean_ms=2"), {"workload": workload("trace")},
         "tpot_mean_ms is not one the trace workload's stop rule watches"),
    ],
)
def test_budget_bad_input_is_one_usage_error(req, kw, message):
    with pytest.raises(UsageError, match=message.replace("+", r"\+").replace("(", r"\(")):
        budget_for(req, **kw)


def test_campaign_snapshot_step_takes_the_adaptive_options(monkeypatch):
    from parity.serving import snapshot as snap

    seen = {}
    monkeypatch.setattr(snap, "make_plan", lambda profile, req: seen.setdefault("req", req) and SimpleNamespace(engines=[], model="m", gpus=[]))
    monkeypatch.setattr(snap, "check_env", lambda plan, policy, allow_env: None)
    monkeypatch.setattr(snap.session, "measured", lambda ctx, engines, body, gates=None, serve=None, gpus=(): [])
    monkeypatch.setattr(snap, "gate_inputs", lambda profile: None)
    monkeypatch.setattr(snap, "binary_gates", lambda inputs, engines, spec: {})
    monkeypatch.setattr(snap, "write_summary", lambda plan, run, arms, gated: {"medians": [], "ratios": [], "headline": "", "valid": True, "stop": {"rule": "until-ci"}})
    ctx = SimpleNamespace(profile=SimpleNamespace(policy=None), as_run=lambda: None)
    out = snap.campaign_step(ctx, {"until_ci": 1.5, "max_repeats": 8, "budget_s": 600})
    assert (seen["req"].until_ci, seen["req"].max_repeats, seen["req"].budget_s) == (1.5, 8, 600) and out["stop"] == {"rule": "until-ci"}
    with pytest.raises(Exception, match="with.until_cii: unknown snapshot option"):
        snap.campaign_step(ctx, {"until_cii": 1.5})


def test_an_interrupt_swallowed_inside_a_block_still_ends_the_loop():
    """The first signal's KeyboardInterrupt can be lost where it lands; the flag it left ends the
    loop at the next block boundary (a snapshot once kept adding blocks after Ctrl-C)."""
    from parity import interrupts

    ran = []

    def block(b):
        ran.append(b)
        if b == 1:
            interrupts.note(2)  # the handler ran; its KeyboardInterrupt was swallowed in the block

    interrupts.reset()
    try:
        with pytest.raises(KeyboardInterrupt, match="signal 2"):
            run_blocks(Budget(until_ci_pct=0.001, min_blocks=3, max_blocks=50), block, lambda: {"x": 50.0})
    finally:
        interrupts.reset()
    assert ran == [0, 1]
    assert run_blocks(Budget(min_blocks=2), lambda b: None, lambda: {"x": 50.0})[2] == 2  # no signal: runs on


def test_a_trace_workload_waits_on_the_request_paired_ratios_it_names():
    b = budget_for(SnapshotRequest(until_ci="request_ttft_median=2", max_repeats=16), workload=workload("trace"))
    assert b.targets == {"request_ttft_median": 2.0} and b.until_ci_pct is None and b.max_blocks == 16


def test_a_trace_workload_may_also_wait_on_its_headline_the_arms_own_percentiles():
    """The arms' p50 TTFT ratio (the headline's paired form) is a target beside the request-paired ones;
    a metric that is neither is refused with the list of both."""
    b = budget_for(SnapshotRequest(until_ci="ttft_sched_p50_ms=2,request_ttft_median=2", max_repeats=40),
                   workload=workload("trace"))
    assert b.targets == {"ttft_sched_p50_ms": 2.0, "request_ttft_median": 2.0} and b.max_blocks == 40
    with pytest.raises(UsageError) as e:
        budget_for(SnapshotRequest(until_ci="decode_agg_tps=2"), workload=workload("trace"))
    assert "decode_agg_tps" in str(e.value) and "ttft_sched_p50_ms" in str(e.value) and "request_ttft_median" in str(e.value)
