"""Paired block statistics on recorded runs, and their false-claim / power rates from
recorded noise (the H100 long sweep's per-block ratios; the users' Phase139 same-binary CV)."""

import math
from pathlib import Path

import pytest

from parity.stats import adaptive, paired, simulate
from parity.stats.paired import EQUIVALENT, IMPROVED, INCONCLUSIVE, REGRESSED

LONG_SWEEP = Path(__file__).parent.parent / "data" / "h100-long-sweep-parity_summary.tsv"
AA_16G = Path(__file__).parent.parent / "data" / "h100-noise" / "aa-parity_summary.tsv"  # one stock build as two arms, 16 GB dense, 8 blocks


def arm(engine: str, n: int, metric: str = "decode_agg_tps") -> dict:
    import csv

    with open(LONG_SWEEP) as f:
        rows = [r for r in csv.DictReader(f, delimiter="\t") if r["kind"] == "row" and r["engine"] == engine and r["n"] == str(n)]
    return {int(r["repeat"]): float(r[metric]) for r in rows}


def test_long_sweep_n8_is_a_regression_the_users_rule_called_noise():
    p = paired.paired(arm("stock", 8), arm("paged", 8))
    assert [round(r, 3) for r in p.ratios] == [0.900, 0.846, 0.886, 0.941, 0.906]
    # geometric mean and t on log ratios; the 0.896 [0.853, 0.938] is the same t interval on the raw ratios
    assert p.ratio == pytest.approx(0.8953, abs=5e-4)
    assert (p.low, p.high) == (pytest.approx(0.8534, abs=5e-4), pytest.approx(0.9391, abs=5e-4))
    assert p.outcome == REGRESSED and p.n_blocks == 5


@pytest.mark.parametrize("n", [1, 32])
def test_long_sweep_uncorrelated_points_are_inconclusive_with_an_estimate(n):
    p = paired.paired(arm("stock", n), arm("paged", n))
    assert p.outcome == INCONCLUSIVE
    assert p.half_width_pct > 15
    assert p.blocks_needed is None or p.blocks_needed > 5
    assert "blocks" in p.reason


def test_ttft_lower_is_better_improves_when_b_is_faster():
    p = paired.paired(arm("stock", 8, "ttft_mean_ms"), arm("paged", 8, "ttft_mean_ms"), better="lower")
    assert p.ratio < 0.8 and p.outcome == IMPROVED


def test_equivalent_needs_the_whole_interval_inside_the_threshold():
    a = {i: 100.0 for i in range(6)}
    b = {i: 100.0 * (1 + d) for i, d in enumerate([0.003, -0.002, 0.001, 0.0, -0.001, 0.002])}
    p = paired.paired(a, b)
    assert p.outcome == EQUIVALENT and p.high < 1.02 and p.low > 1 / 1.02
    wide = paired.paired(a, {i: 100.0 * (1 + d) for i, d in enumerate([0.03, -0.03, 0.02, -0.02, 0.01, -0.01])})
    assert wide.outcome == INCONCLUSIVE and wide.blocks_needed and wide.blocks_needed > 6


def test_a_real_change_under_the_threshold_is_not_a_claim():
    a = {i: 100.0 for i in range(8)}
    b = {i: 101.0 + (0.1 if i % 2 else -0.1) for i in range(8)}  # +1 %, tight
    p = paired.paired(a, b)
    assert p.low > 1 and p.outcome == EQUIVALENT  # inside +-2 %: no difference that matters


def test_one_block_and_no_blocks_say_why():
    assert "one block" in paired.paired({0: 1.0}, {0: 2.0}).reason
    assert paired.paired({0: 1.0}, {1: 2.0}).reason == "no block has both arms"
    assert paired.paired({0: 1.0, 1: 0.0}, {0: 1.0, 1: 1.0}).n_blocks == 1  # a zero is not a ratio


def test_blocks_needed_is_where_the_interval_gets_narrow_enough():
    n = paired.blocks_for(0.02, 0.01, 0.95, 3)
    t = paired.t_quantile(0.95, n - 1)
    assert t * 0.02 / math.sqrt(n) < 0.01 <= paired.t_quantile(0.95, n - 2) * 0.02 / math.sqrt(n - 1)


def test_stop_rules_name_themselves():
    b = adaptive.Budget(until_ci_pct=3, min_blocks=3, max_blocks=5, max_seconds=100)
    assert adaptive.stop(b, 2, {"x": 1.0}) is None  # under the minimum
    assert adaptive.stop(b, 3, {"x": 2.9, "y": 1.0})[0] == adaptive.UNTIL_CI
    assert adaptive.stop(b, 3, {"x": 3.1}, elapsed_s=10, block_s=10) is None
    assert adaptive.stop(b, 4, {"x": 3.1}, elapsed_s=95, block_s=10)[0] == adaptive.TIME_BUDGET
    assert adaptive.stop(b, 5, {"x": None})[0] == adaptive.MAX_REPEATS
    assert adaptive.stop(adaptive.Budget(None, 4), 4, {})[0] == adaptive.FIXED


NOISES = [
    simulate.Noise("users GB10 same-binary", "seeds Phase139: 7 identical runs, agg_tps CV 1.349 %", arm_cv_pct=1.349),
    simulate.Noise("H100 long sweep N=8", "docs/evidence/device-h100-real/long-sweep, paged/stock per block", block_logs=simulate.logs_from_tsv(str(LONG_SWEEP), "decode_agg_tps", 8, "stock", "paged")),
    *[simulate.Noise(f"H100 A/A 16 GB N={n}", "docs/evidence/device-h100-noise/aa, stock_b/stock per block", block_logs=simulate.logs_from_tsv(str(AA_16G), "decode_agg_tps", n, "stock", "stock_b")) for n in (1, 8)],
]


@pytest.mark.parametrize("noise", NOISES, ids=lambda n: n.name)
def test_recommended_budget_false_claims_at_most_5pct_and_finds_3pct(noise):
    aa = simulate.rates(noise, 0.0, adaptive.RECOMMENDED, sessions=1000, seed=7)
    assert aa["claims"] <= 0.05, aa
    ab = simulate.rates(noise, 0.03, adaptive.RECOMMENDED, sessions=1000, seed=8)
    assert ab[IMPROVED] >= 0.80, ab


@pytest.mark.parametrize("n", [1, 32])
def test_host_bound_noise_makes_few_false_claims_even_when_it_cannot_resolve(n):
    noise = simulate.Noise(f"H100 N={n}", "long sweep", block_logs=simulate.logs_from_tsv(str(LONG_SWEEP), "decode_agg_tps", n, "stock", "paged"))
    assert noise.sd_log() > 0.15
    # spread 16-18 %: every estimate is past 2 %, so the claim rate is the interval's own 5 %
    # (two-sided 95 %), here within 3 Monte-Carlo standard errors of it; and nearly all inconclusive
    aa = simulate.rates(noise, 0.0, adaptive.RECOMMENDED, sessions=1000, seed=3)
    assert aa["claims"] <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 1000), aa
    assert aa[INCONCLUSIVE] >= 0.9 and aa["mean_blocks"] > 19


def test_recorded_aa_on_a_gpu_bound_model_is_never_a_claim():
    """The H100 A/A itself (8 blocks, 16 GB dense): equivalent or inconclusive on every
    headline metric at every N."""
    import csv

    with open(AA_16G) as f:
        rows = [dict(r, n=int(r["n"]), repeat=int(r["repeat"]), valid=r["valid"] == "True") for r in csv.DictReader(f, delimiter="\t") if r["kind"] == "row"]
    for r in rows:
        for k in ("decode_agg_tps", "decode_perseq_tps", "agg_tps", "ttft_mean_ms"):
            r[k] = float(r[k])
    from parity.metrics.registry import direction, headline

    cells = paired.by_point(rows, "stock", headline(), direction)
    assert len(cells) == 12 and {c["outcome"] for c in cells} <= {EQUIVALENT, INCONCLUSIVE}
    assert {c["n"]: c["outcome"] for c in cells if c["metric"] == "decode_agg_tps"}[1] == EQUIVALENT


@pytest.mark.parametrize("df", [1, 2, 5, 30, 999])
def test_quantiles_are_scipy_stats_own(df):
    """t_quantile and spread_upper call scipy.special (lighter to import): the same numbers
    scipy.stats.t.ppf and chi2.ppf give, to the bit."""
    from scipy.stats import chi2, t

    for c in (0.9, 0.95, 0.99):
        assert paired.t_quantile(c, df) == float(t.ppf(0.5 + c / 2, df))
    assert paired.spread_upper(df + 1) == math.sqrt(df / float(chi2.ppf(0.10, df)))


def test_an_interval_past_the_floating_point_range_is_inconclusive_not_a_crash():
    """Issue 56 N11: exp of a wide interval overflowed (OverflowError) in paired, unpaired and the
    family; now the interval is absent, the outcome inconclusive and the reason says why."""
    from parity.stats import family
    from parity.stats.unpaired import welch

    wide = paired.paired({0: 1.0, 1: 1.0}, {0: 0.2, 1: 5.0}, confidence=0.999)  # t(0.999, 1 df) x sd 2.3: exp(1024)
    assert wide.outcome == INCONCLUSIVE and wide.low is None and wide.high is None and wide.half_width_pct is None
    assert "spread too wide (sd 2.28) for an interval in floating point" in wide.reason and math.isfinite(wide.ratio)
    u = welch([1e-100, 1e100], [1e-100, 1e100])  # log values +-230: a half-width of ~1400 in log space
    assert u["outcome"] == INCONCLUSIVE and u["low"] is None and "too wide" in u["reason"]
    (cell,) = family.adjust([wide.to_dict()], 0.001)  # its interval at level 0.001: exp(1024) again
    assert cell["outcome"] == INCONCLUSIVE and cell["family"]["low"] is None
    tiny = paired.paired({0: 1.0, 1: 1.0}, {0: 1e-308, 1: 5e-324})  # beyond stats.RANGE: not a value
    assert tiny.reason == "no block has a ratio: in each of the 2 blocks with both arms a value is 0 or out of range"
