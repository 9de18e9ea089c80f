"""The crossover's paired interval (parity.stats.paired with groups): the two GPU placements weighed
alike, the spread taken within each placement.  Checked against ordinary least squares (numpy), by
simulation, and on the recorded two-H200 A/As (tests/data/replay/h200x2-aa-42, h200x2-aa-147b,
h200x2-aa-147c: the summaries as parity wrote them, each row with its "gpu")."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from parity.metrics.registry import direction
from parity.stats.paired import METHOD, METHOD_CROSSOVER, by_point, paired

REPLAY = Path(__file__).parents[1] / "data" / "replay"


def summary(name: str) -> dict:
    return json.loads(gzip.decompress((REPLAY / name / "summary.json.gz").read_bytes()))


def test_it_is_the_intercept_of_least_squares_with_the_placement_as_a_term():
    """Unbalanced on purpose (4 blocks on GPU 0, 3 on GPU 1): with the placement coded +-1 the
    intercept is the mean of the two placements' means and its standard error the interval's."""
    logs = np.log([1.031, 1.018, 1.026, 1.041, 0.978, 0.969, 0.985])
    gpu = [0, 0, 0, 0, 1, 1, 1]
    p = paired(dict.fromkeys(range(7), 1.0), {k: math.exp(x) for k, x in enumerate(logs)}, "lower",
               groups=dict(enumerate(gpu)))
    design = np.column_stack([np.ones(7), [1 if g == 0 else -1 for g in gpu]])
    coef, res, *_ = np.linalg.lstsq(design, logs, rcond=None)
    df = 7 - 2
    sigma = math.sqrt(res[0] / df)
    se = sigma * math.sqrt(np.linalg.inv(design.T @ design)[0, 0])
    t = stats.t.ppf(0.975, df)
    assert p.method == METHOD_CROSSOVER
    assert p.ratio == pytest.approx(math.exp(coef[0]), rel=1e-12)
    assert (p.low, p.high) == pytest.approx((math.exp(coef[0] - t * se), math.exp(coef[0] + t * se)), rel=1e-12)
    assert p.sd_log == pytest.approx(sigma, rel=1e-12)
    assert p.by_placement == pytest.approx({"0": math.exp(logs[:4].mean()), "1": math.exp(logs[4:].mean())}, rel=1e-5)


@pytest.mark.parametrize("groups", [None, {}, dict.fromkeys(range(6), 0), {0: 0, 1: 1, 2: 1, 3: 1, 4: 1, 5: 1},
                                    {0: 0, 1: 0, 2: 1, 3: 1, 4: 2, 5: 2}, {0: 0, 1: 0, 2: 1, 3: 1, 4: None, 5: None}])
def test_without_two_placements_of_two_blocks_each_it_is_the_plain_interval(groups):
    b = {k: 1 + 0.01 * (k % 3) for k in range(6)}
    p, plain = paired(dict.fromkeys(range(6), 1.0), b, "higher", groups=groups), paired(dict.fromkeys(range(6), 1.0), b, "higher")
    assert p.method == METHOD and p.by_placement is None
    assert (p.ratio, p.low, p.high) == (plain.ratio, plain.low, plain.high)


def test_a_gpus_own_speed_is_taken_out_of_the_spread_and_the_interval_still_covers():
    """A/A blocks in crossover with GPU 1 3 % slower than GPU 0 and 1 % noise a block: the plain
    interval is as wide as the GPU step, the crossover's as the noise, and it covers the true ratio
    (1) about 95 % of the time."""
    rng = np.random.default_rng(58)
    runs, n, covered, widths = 2000, 10, 0, []
    place = {k: k % 2 for k in range(n)}
    for _ in range(runs):
        logs = rng.normal(0, 0.01, n) + np.where(np.arange(n) % 2 == 0, 0.03, -0.03) / 2
        b = {k: math.exp(x) for k, x in enumerate(logs)}
        p, plain = paired(dict.fromkeys(range(n), 1.0), b, groups=place), paired(dict.fromkeys(range(n), 1.0), b)
        covered += p.low <= 1 <= p.high
        widths.append((p.half_width_pct, plain.half_width_pct))
    assert covered / runs == pytest.approx(0.95, abs=0.015)
    w = np.median(np.array(widths), axis=0)
    assert w[0] < 0.85 and w[1] > 1.2  # half-widths ~0.73 % (t9 x 1 % / sqrt 10) against ~1.3 % (1.8 % spread)


def rows_without_gpu(doc: dict) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "gpu"} for r in doc["rows"]]


@pytest.mark.parametrize("name, metric, plain_sd, crossover_sd, ratio, low, high, outcome", [
    ("h200x2-aa-147b", "j_per_output_tok", 3.00, 0.43, 0.9992, 0.9965, 1.0020, "equivalent"),
    ("h200x2-aa-147b", "ttft_sched_p50_ms", 2.43, 2.55, 0.9991, 0.9829, 1.0156, "equivalent"),
    ("h200x2-aa-147b", "tpot_p50_ms", 1.00, 0.98, 0.9994, 0.9931, 1.0057, "equivalent"),
    ("h200x2-aa-147c", "ttft_sched_p50_ms", 2.48, 2.44, 1.0007, 0.9866, 1.0150, "equivalent"),
    ("h200x2-aa-147c", "tpot_p50_ms", 0.84, 0.87, 0.9996, 0.9946, 1.0047, "equivalent"),
    ("h200x2-aa-147c", "j_per_output_tok", 3.13, 0.25, 1.0023, 1.0008, 1.0037, "equivalent"),
    ("h200x2-aa-42", "j_per_output_tok", 2.06, 0.64, 0.9998, 0.9965, 1.0031, "equivalent"),
    ("h200x2-aa-42", "tpot_p50_ms", 1.23, 1.08, 1.0039, 0.9983, 1.0096, "equivalent")])
def test_the_recorded_two_h200_aas(name, metric, plain_sd, crossover_sd, ratio, low, high, outcome):
    """J per token moved with the placement (GPU 1 of the 147b host spent ~3 % more a token than
    GPU 0); TTFT and TPOT hardly did, and there the crossover's interval is about the plain one."""
    doc = summary(name)
    (p,) = by_point(doc["rows"], doc["reference_engine"], [metric], direction, key="point")
    (plain,) = by_point(rows_without_gpu(doc), doc["reference_engine"], [metric], direction, key="point")
    assert plain["method"] == METHOD and p["method"] == METHOD_CROSSOVER
    assert (plain["sd_log"] * 100, p["sd_log"] * 100) == pytest.approx((plain_sd, crossover_sd), abs=0.01)
    assert (p["ratio"], p["low"], p["high"]) == pytest.approx((ratio, low, high), abs=1e-4)
    assert p["outcome"] == outcome and p["n_blocks"] == plain["n_blocks"]


def test_the_request_paired_ratios_of_a_crossover_use_it_too():
    from parity.results.model import point_rows
    from parity.workloads import request_paired

    doc = summary("h200x2-aa-147b")
    got = {(p["quantity"], p["statistic"]): p for p in request_paired.summary(point_rows(doc["rows"]), "stock", 2.0, 0.95)}
    median = got[("ttft_sched_ms", "median")]
    assert median["method"] == METHOD_CROSSOVER and set(median["by_placement"]) == {"0", "1"}
    assert (median["ratio"], median["low"], median["high"]) == pytest.approx((0.9995, 0.9961, 1.0029), abs=1e-4)
