"""`parity gap` on the H100 lever run (docs/evidence/device-h100-noise: paged vs paged with
LLAMA_MOE_NO_FORCE_GRAPHS=1 on a Q8_0 MoE, serving sweep and batched-bench A/B)."""

import math
import shutil
from pathlib import Path

import pytest

from parity.efficiency.gap import between_runs
from parity.errors import UsageError

DATA = Path(__file__).resolve().parents[1] / "data" / "h100-noise"


@pytest.fixture
def runs(tmp_path):
    s, b = tmp_path / "serving", tmp_path / "bench"
    s.mkdir(), b.mkdir()
    shutil.copy(DATA / "lever-summary.json", s / "summary.json")
    shutil.copy(DATA / "lever-bench.json", b / "bench.json")
    return s, b


def test_chain_multiplies_back_and_overhead_is_wider_than_either(runs):
    doc = between_runs(*map(str, runs))
    assert [p["n"] for p in doc["points"]] == [1, 8, 32]
    for p in doc["points"]:
        serving, static, over = p["links"]
        assert serving["ratio"] == pytest.approx(static["ratio"] * over["ratio"], rel=1e-5)
        hs, hb, ho = (math.log(lk["high"] / lk["low"]) / 2 for lk in (serving, static, over))
        assert ho == pytest.approx(math.hypot(hs, hb), rel=1e-3) and ho > max(hs, hb)
    n32 = doc["points"][-1]["links"]
    # the lever costs ~11 % of engine decode at B=32 and the server path neither adds nor hides it
    assert n32[1]["high"] < 1 and n32[0]["high"] < 1 and n32[2]["low"] < 1 < n32[2]["high"]


def test_a_run_that_is_not_a_bench_ab_is_one_line(runs, tmp_path):
    s, _ = runs
    with pytest.raises(UsageError, match="no bench.json"):
        between_runs(str(s), str(tmp_path))
