"""Stop targets per metric (--until-ci decode_agg_tps=1,ttft_mean_ms=10, stats.until_ci_targets):
parsing, the stop rule on each half-width's own target, and the line that says which metric kept
the blocks going, replayed on the recorded H100 serving A/A (tests/data/h100-noise), where TTFT at
N=1 (block ratios 0.62-1.18) never narrows to 2 %."""

from __future__ import annotations

import csv

import pytest

from parity.errors import UsageError
from parity.metrics.registry import direction
from parity.stats.blocks import block_line, half_widths
from parity.serving.snapshot import SnapshotRequest
from parity.options import parse_until_ci
from parity.stats.adaptive import MAX_REPEATS, UNTIL_CI, Budget, stop
from tests.conftest import DATA
from tests.unit.test_blocks import budget_for

HEADLINE = ["decode_agg_tps", "decode_perseq_tps", "agg_tps", "ttft_mean_ms"]


def test_the_forms_of_until_ci():
    assert parse_until_ci(1.5) == (1.5, {}) and parse_until_ci("1.5") == (1.5, {})
    assert parse_until_ci("decode_agg_tps=1,ttft_mean_ms=10") == (None, {"decode_agg_tps": 1.0, "ttft_mean_ms": 10.0})
    assert parse_until_ci("2, ttft_mean_ms=10") == (2.0, {"ttft_mean_ms": 10.0})
    assert parse_until_ci({"*": 2, "ttft_mean_ms": 10}) == (2.0, {"ttft_mean_ms": 10.0})
    for bad, msg in (("0", "--until-ci must be a positive number, got '0'"), ("ttft_mean_ms=-1", "--until-ci: 'ttft_mean_ms=-1' is not a positive percentage"),
                     ("ttft mean=3", "is not a metric name"), ("", "must be a positive number or METRIC=PCT")):  # fmt: skip
        with pytest.raises(UsageError, match=msg):
            parse_until_ci(bad)


def test_each_half_width_waits_on_its_own_target_and_unnamed_ones_not_at_all():
    b = Budget(None, 3, 20, targets={"decode_agg_tps": 1.0, "ttft_mean_ms": 10.0})
    hw = {"p N=1 decode_agg_tps": 0.8, "p N=1 ttft_mean_ms": 12.0, "p N=1 agg_tps": 50.0}
    assert stop(b, 5, hw) is None  # ttft over 10; agg_tps is not waited on
    rule, why = stop(b, 20, hw)
    assert rule == MAX_REPEATS and "(kept going by ttft_mean_ms)" in why and "agg_tps +-" not in why
    rule, why = stop(b, 21, {**hw, "p N=1 ttft_mean_ms": 9.0})
    assert rule == UNTIL_CI and why.endswith("the last to narrow: ttft_mean_ms")
    assert "1/3 over their targets" in block_line(4, 4, hw, None, b)
    assert b.describe().startswith("until the half-widths reach their targets: decode_agg_tps <= 1%, ttft_mean_ms <= 10%")


def test_the_snapshot_budget_takes_targets_from_the_flag_or_the_profile():
    b = budget_for(SnapshotRequest(until_ci="decode_agg_tps=1,ttft_mean_ms=10"))
    assert (b.until_ci_pct, b.targets, b.min_blocks, b.max_blocks) == (None, {"decode_agg_tps": 1.0, "ttft_mean_ms": 10.0}, 3, 20)
    b = budget_for(SnapshotRequest(), stats={"until_ci_pct": 1.5, "until_ci_targets": {"ttft_mean_ms": 10.0}})
    assert (b.until_ci_pct, b.targets) == (1.5, {"ttft_mean_ms": 10.0})
    with pytest.raises(UsageError, match="--until-ci: s_tg is not a headline metric the stop rule watches"):
        budget_for(SnapshotRequest(until_ci="s_tg=1"))


def test_a_bench_ab_watches_s_tg_alone():
    from types import SimpleNamespace

    from parity.bench import ab as bench_ab

    assert bench_ab.budget_for(bench_ab.ABRequest(until_ci="s_tg=2"), SimpleNamespace(), 2).until_ci_pct == 2.0
    with pytest.raises(UsageError, match="decode_agg_tps is not what llama-batched-bench's stop rule watches"):
        bench_ab.budget_for(bench_ab.ABRequest(until_ci="decode_agg_tps=2"), SimpleNamespace(), 2)


def recorded_aa(ns=(1, 8)) -> list[dict]:
    rows = []
    with open(DATA / "h100-noise" / "aa-parity_summary.tsv") as f:
        for r in csv.DictReader(f, delimiter="\t"):
            if r["kind"] == "row" and int(r["n"]) in ns:
                rows.append({"engine": r["engine"], "n": int(r["n"]), "repeat": int(r["repeat"]), "valid": r["valid"] == "True", **{m: float(r[m]) for m in HEADLINE}})
    return rows


def replay(budget: Budget, rows: list[dict]):
    for k in range(1, 9):
        if d := stop(budget, k, half_widths([r for r in rows if r["repeat"] < k], "stock", HEADLINE, 2.0, 0.95, direction)):
            return k, d
    return None


def test_on_the_recorded_h100_aa_ttft_keeps_a_uniform_target_going_and_its_own_target_ends_it():
    rows = recorded_aa()
    k, (rule, why) = replay(Budget(2.0, 3, 8), rows)
    assert (k, rule) == (8, MAX_REPEATS) and "stock_b N=1 ttft_mean_ms +-13.76%" in why and "decode_agg_tps" not in why
    d, t = parse_until_ci("2,ttft_mean_ms=15")
    k, (rule, why) = replay(Budget(d, 3, 8, targets=t), rows)
    assert (k, rule) == (8, UNTIL_CI) and "widest 13.76%" in why
    d, t = parse_until_ci("decode_agg_tps=2,agg_tps=2")  # the throughputs alone
    k, (rule, why) = replay(Budget(d, 3, 8, targets=t), rows)
    assert rule == UNTIL_CI and "ttft" not in why


def test_a_fixed_budget_line_does_not_talk_of_targets():
    assert block_line(2, 2, {"p N=1 decode_agg_tps": 3.0}, None, Budget(None, 3, 3)) == "block 2 done (2 measured): widest +-3.00% (p N=1 decode_agg_tps); next block"


def test_a_stop_on_max_repeats_says_how_many_blocks_the_spread_needs():
    """The H200's N=1 TTFT A/A (docs/evidence/device-h200-1129b/): +-6.24 % in the stop form after
    10 blocks.  Read back to its spread, the stop form falls under 5 % at 13 blocks (5.27 % at 12,
    4.92 % at 13: computed apart with scipy's t and chi2)."""
    b = Budget(until_ci_pct=None, min_blocks=3, max_blocks=10, targets={"ttft_mean_ms": 5.0})
    rule, why = stop(b, 10, {"stock_b N=1 ttft_mean_ms": 6.237724, "stock_b N=1 decode_agg_tps": 1.03})
    assert rule == MAX_REPEATS
    assert why.endswith("; at this spread about 13 blocks would reach 5% (stock_b N=1 ttft_mean_ms)")
    b = Budget(until_ci_pct=1.0, min_blocks=3, max_blocks=4)
    assert "more than 1000 blocks" in stop(b, 4, {"a N=1 decode_agg_tps": 400.0})[1]
