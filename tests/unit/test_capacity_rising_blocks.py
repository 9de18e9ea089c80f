"""A block whose binding margins do not fall with the load gives no capacity (estimate.rises), on
recorded real runs re-estimated from their probes: the llama-server A/A beside two CPU hogs on the
2-core box (2026-11-30), which read "regressed" 0.7586 [0.5757, 0.9997] with its block 2 rising for
both engines, and four quiet A/As whose blocks all fall, re-estimated to their recorded capacities."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from parity.capacity.estimate import Probed, estimates
from parity.capacity.search import Plan, Search
from parity.capacity.slo import parse_slo

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests/data/capacity"


def reestimate(path: Path) -> tuple[dict, dict, list]:
    """(the recorded doc, per-block capacities, ratios) from the run's own probes and plan."""
    doc = json.loads(path.read_text())
    plan = doc["plan"]
    slo = ",".join(f"{k}={v:g}" for k, v in plan["limits_ms"].items())
    p = Plan(engines=plan["engines"], reference=plan["reference"], objectives=parse_slo(slo),
             threshold_pct=plan["threshold_pct"], confidence=plan["confidence"])  # fmt: skip
    blocks = [{"block": b["block"], "probes": {e: [Probed(e, g["load"], b["block"], g["margins"], g["attainment"],
                                                          g["throughput_tps"], g["user_tps"], g["sent"], g["seconds"])
                                                   for g in v["probes"]] for e, v in b["engines"].items()}}
              for b in doc["blocks"]]  # fmt: skip
    per_block, _ = estimates(blocks, p.engines, p.objectives)
    return doc, per_block, Search(None, None, p).ratios(per_block)


def test_the_a_a_beside_two_hogs_drops_its_rising_block_and_claims_nothing():
    doc, per_block, (ratio,) = reestimate(DATA / "cpu-llama-aa-two-hogs-capacity.json")
    assert doc["ratios"][0]["outcome"] == "regressed" and doc["ratios"][0]["blocks"] == [0, 1, 2, 3, 5]
    for e in ("stock", "stock_b"):
        assert per_block[e][2]["capacity"] is None and "do not fall with the load" in per_block[e][2]["why"]
        assert per_block[e][2]["guess"] == pytest.approx(doc["blocks"][2]["engines"][e]["capacity"], rel=1e-4)
    assert ratio["blocks"] == [0, 1, 3, 5] and ratio["outcome"] == "inconclusive" and ratio["low"] < 1 < ratio["high"]


QUIET = [DATA / "cpu-llama-aa-ttft100-capacity.json", DATA / "cpu-llama-aa-ttft200-capacity.json",
         ROOT / "docs/evidence/device-h200-1130/capacity-aa-capacity.json",
         ROOT / "docs/evidence/device-h200-1129f/capacity-aa-capacity.json"]


@pytest.mark.parametrize("path", QUIET)
def test_quiet_runs_keep_every_block(path):
    doc, per_block, (ratio,) = reestimate(path)
    for b in doc["blocks"]:
        for e, v in b["engines"].items():
            got = per_block[e][b["block"]]["capacity"]
            assert (got is None) == (v["capacity"] is None)
            assert got is None or got == pytest.approx(v["capacity"], rel=1e-4)
    recorded = doc["ratios"][0]
    assert ratio["outcome"] == recorded["outcome"] and ratio["ratio"] == pytest.approx(recorded["ratio"], rel=1e-4)
