"""One budget resolution (parity.stats.budget) behind the four stop rules: the serving snapshot,
capacity, the batched-bench A/B and the op timing read the same flags the same way; each keeps
what it watches and its own refusals (their messages: test_blocks, test_capacity_plan,
test_bench_ab, test_optime)."""

from __future__ import annotations

import pytest

from parity.bench import ab as bench_ab
from parity.capacity.plan import CapacityRequest
from parity.capacity.plan import make_budget as capacity_budget
from parity.config import load_profile
from parity.errors import UsageError
from parity.optime import plan as opplan
from parity.serving.snapshot import SnapshotRequest
from parity.stats.adaptive import Budget
from parity.stats.budget import StatsDefaults, resolve_budget
from tests.unit.test_blocks import budget_for as snapshot_budget


def four(stats, repeat=None, until_ci=None, max_repeats=None, budget_s=None) -> list[Budget]:
    flags = dict(until_ci=until_ci, max_repeats=max_repeats, budget_s=budget_s)
    return [
        snapshot_budget(SnapshotRequest(repeat=repeat, **flags), repeat=repeat or 3, stats=vars_of(stats)),
        capacity_budget(stats, CapacityRequest(repeat=repeat, **flags), 2),
        bench_ab.budget_for(bench_ab.ABRequest(repeat=repeat, **flags), stats, 2),
        opplan.budget(repeat, until_ci, max_repeats, budget_s, stats, 2),
    ]


def vars_of(stats) -> dict:
    return {k: getattr(stats, k) for k in ("until_ci_pct", "until_ci_targets", "max_repeats", "budget_s")}


def test_the_four_commands_resolve_the_same_flags_to_the_same_budget():
    st = load_profile("smoke").stats
    assert four(st, repeat=4) == [Budget(None, 4, 4)] * 4
    assert four(st, repeat=4, until_ci="2", max_repeats=8, budget_s=600.0) == [Budget(2.0, 4, 8, 600.0)] * 4
    assert {b.max_seconds for b in four(st, repeat=4, until_ci=2)} == {st.budget_s}  # the profile's bound


def test_profile_targets_fill_in_as_each_rule_watches():
    st = load_profile("smoke").stats
    st.until_ci_pct, st.until_ci_targets = 2.0, {"ttft_mean_ms": 10.0}
    snap, cap, bench, ops = four(st)
    assert (snap.until_ci_pct, snap.targets, snap.min_blocks) == (2.0, {"ttft_mean_ms": 10.0}, 3)
    assert not cap.adaptive and cap.min_blocks == 6  # capacity waits only on a flag
    assert (bench.until_ci_pct, bench.targets) == (2.0, {}) == (ops.until_ci_pct, ops.targets)  # not a serving metric
    st.until_ci_targets = {"s_tg": 3.0}  # a one-metric rule takes its own target over the common one
    assert bench_ab.budget_for(bench_ab.ABRequest(), st, 2).until_ci_pct == 3.0
    assert not bench_ab.budget_for(bench_ab.ABRequest(repeat=5), st, 2).adaptive  # --repeat alone: fixed


def test_a_refusal_waits_until_blocks_would_be_added():
    kw = dict(watched=("m",), unwatched="{metric}", too_few="{lo}>{hi}", refusals=["cannot add blocks"])
    assert resolve_budget(None, None, None, 3, StatsDefaults(), **kw) == Budget(None, 3, 3)
    with pytest.raises(UsageError, match="cannot add blocks"):
        resolve_budget("m=2", None, None, 3, StatsDefaults(), **kw)
    with pytest.raises(UsageError, match="^x$"):
        resolve_budget("x=2", None, None, 3, StatsDefaults(), **kw)
