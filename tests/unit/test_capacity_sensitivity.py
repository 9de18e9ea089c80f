"""How far 1 % on the binding objective's percentile moves the capacity (`capacity_pct_per_pct`),
read off the pooled slope, on recorded real runs: three A/A runs, two llama-server on this 2-core
box (TTFT p90 limits of 100 and 200 ms) and one on an H200 (TPOT p90 12 ms).  The run whose limit
sat on a flatter stretch of its percentile spread its per-block ratios wider, in that order."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from parity.capacity.curves import pct_per_pct
from parity.cli.capacity import render_result
from tests.lines import Lines

ROOT = Path(__file__).resolve().parents[2]
RUNS = {
    "cpu, TTFT p90 200 ms (past the 8 slots)": ROOT / "tests/data/capacity/cpu-llama-aa-ttft200-capacity.json",
    "cpu, TTFT p90 100 ms (below them)": ROOT / "tests/data/capacity/cpu-llama-aa-ttft100-capacity.json",
    "h200, TPOT p90 12 ms": ROOT / "docs/evidence/device-h200-1130/capacity-aa-capacity.json",
}


def moves(doc: dict) -> float:
    """The largest capacity_pct_per_pct over the engines, from each one's recorded binding slope."""
    return max(pct_per_pct(e["objectives"][e["binds"]]["slope"]) for e in doc["engines"].values())


def test_one_percent_on_the_percentile_over_the_slope():
    assert pct_per_pct(-1.0) == pytest.approx(1.0)
    assert pct_per_pct(-2.0) == pytest.approx((math.sqrt(1.01) - 1) * 100)
    assert pct_per_pct(0.0) is None and pct_per_pct(0.3) is None and pct_per_pct(None) is None
    assert pct_per_pct(float("nan")) is None


def test_the_runs_whose_limit_binds_on_a_flatter_stretch_spread_wider():
    docs = {k: json.loads(p.read_text()) for k, p in RUNS.items()}
    k = {name: moves(d) for name, d in docs.items()}
    spread = {name: statistics.stdev(math.log(x) for x in d["ratios"][0]["ratios"]) for name, d in docs.items()}
    assert list(k.values()) == sorted(k.values()), k  # 0.37, 0.87, 2.6 % per %
    assert list(spread.values()) == sorted(spread.values()), spread  # 1.2, 3.0, 5.8 % per block
    assert k["h200, TPOT p90 12 ms"] > 2 > 1 > k["cpu, TTFT p90 100 ms (below them)"] > 0.5 > k[
        "cpu, TTFT p90 200 ms (past the 8 slots)"]


@pytest.mark.parametrize("name, noted", [("h200, TPOT p90 12 ms", True),
                                         ("cpu, TTFT p90 200 ms (past the 8 slots)", False)])
def test_the_result_says_how_far_and_notes_a_flat_binding_limit(name, noted):
    doc = json.loads(RUNS[name].read_text()) | {"run_dir": "runs/x"}  # the printed result names its run dir
    for e in doc["engines"].values():  # recorded before the field: what estimate.engine_summary now adds
        e["capacity_pct_per_pct"] = pct_per_pct(e["objectives"][e["binds"]]["slope"])
    out = Lines()
    render_result(out, doc)
    text = "\n".join(out.lines)
    for e, v in doc["engines"].items():
        assert f"{e}: capacity " in text and f"(1 % on it moves the capacity {v['capacity_pct_per_pct']:.2g} %)" in text
    assert ("changes slowly with the load where it binds" in text) == noted
