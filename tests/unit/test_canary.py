"""The drift canary (parity.stats.canary): the probe, its robust noise, the blocks it flags and
the discard policy's effect on the paired statistics.  A real serving sweep with it is
tests/integration/test_canary_real.py."""

from __future__ import annotations

import pytest

from parity.metrics.registry import direction
from parity.results.model import point_rows
from parity.stats import canary, paired


def samples(times: list[float], engines=("a", "b")) -> list[dict]:
    return [{"block": i // len(engines), "engine": engines[i % len(engines)], "ms": t} for i, t in enumerate(times)]


def test_the_probe_is_a_fixed_cost_timed_by_the_wall_and_by_its_threads_cpu_clock():
    for wall, cpu in [canary.host_probe(50_000) for _ in range(3)]:
        assert 0 < cpu <= wall + 1.0 and wall < 5_000  # one thread's CPU time cannot outrun the wall (1 ms of clock grain)
    s = canary.sample(3, "paged")
    assert set(s) == {"block", "engine", "ms", "cpu_ms"} and canary.stretch(s) == pytest.approx(s["ms"] / s["cpu_ms"])


def test_a_probe_that_waits_for_a_core_stretches_past_its_cpu_time():
    """Three busy loops per core: the probe's thread gets at most a quarter of one, so its wall
    time is several times its CPU time, however busy the machine was before."""
    import os
    import subprocess
    import sys
    import time

    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(3 * (os.cpu_count() or 1))]
    try:
        time.sleep(0.5)
        wall, cpu = canary.host_probe()
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert wall / cpu > 1.5


def test_a_block_whose_probe_moved_past_the_noise_is_flagged_and_one_outlier_does_not_widen_the_noise():
    quiet = [40.0, 41.0, 39.5, 40.5, 40.2, 39.8, 40.6, 39.9, 40.1, 40.4, 39.7, 40.3]
    doc = canary.assess(samples(quiet[:8] + [58.0] + quiet[8:]))  # block 4, before a: 45 % slow
    assert doc["blocks_flagged"] == [4] and doc["flagged"][0]["engine"] == "a" and doc["flagged"][0]["off_pct"] > 40
    assert doc["mad_pct"] < 2 and doc["threshold_pct"] == pytest.approx(5.0, abs=0.01)  # the floor: a 1 % spread calls 5 %
    assert canary.assess(samples(quiet))["flagged"] == []
    assert canary.assess(samples(quiet[:4]))["why"] == "4 samples: the canary judges from 6"
    assert "flagged: block 4 before a +44 %; flag" in canary.line({**doc, "policy": "flag"})


def test_discard_takes_a_flagged_block_out_of_the_paired_statistics():
    rows = point_rows([{"engine": e, "n": 1, "repeat": b, "valid": True, "decode_agg_tps": v} for b in range(6) for e, v in (("ref", 100.0), ("cand", 100.0 * (0.80 if b == 2 else 1.0)))])
    arms = [{"rows": [r]} for r in rows]
    doc = canary.assess(samples([40.0] * 4 + [70.0, 40.0] + [40.0] * 6, engines=("ref", "cand")))
    assert doc["blocks_flagged"] == [2]
    before = paired.by_point(rows, "ref", ["decode_agg_tps"], lambda m: "higher")[0]
    assert canary.discard(arms, 2, doc) == [2]
    after = paired.by_point(rows, "ref", ["decode_agg_tps"], lambda m: "higher")[0]
    assert before["n_blocks"] == 6 and after["n_blocks"] == 5 and after["ratio"] == pytest.approx(1.0) and before["ratio"] < 0.97


def test_the_intervals_with_and_without_the_flagged_blocks():
    rows = [{"engine": e, "n": 8, "repeat": b, "valid": True, "decode_agg_tps": v} for b in range(6) for e, v in (("ref", 100.0), ("cand", 100.0 * (0.86 if b == 3 else 1.0 + 0.002 * b)))]
    summary = {"reference_engine": "ref", "rows": rows, "canary": {"blocks_flagged": [3]}}
    (w,) = canary.with_and_without(summary, ["decode_agg_tps"], direction)
    assert (w["engine"], w["n"], w["metric"]) == ("cand", 8, "decode_agg_tps")
    assert w["all"][3] == 6 and w["kept"][3] == 5 and w["all"][0] < 0.98 and w["kept"][0] > 1.0
    assert w["kept"][2] - w["kept"][1] < (w["all"][2] - w["all"][1]) / 5  # the flagged block was most of the spread
    assert canary.with_and_without({**summary, "canary": {"blocks_flagged": []}}, ["decode_agg_tps"], direction) == []


def test_only_a_slower_probe_is_a_disturbance_as_on_the_h100():
    """The H100 A/A (tests/data/canary): 4 of 24 probes ran ~40 % faster while every block's
    decode_agg_tps stayed within 928-963 tok/s; none of them is a disturbance.  The same samples
    with one made twice as slow flag that one (the spread of these samples puts the bar at +54 %)."""
    import json
    from pathlib import Path

    doc = json.loads((Path(__file__).resolve().parents[1] / "data" / "canary" / "h100-aa-12-blocks.json").read_text())
    got = doc["canary"]["samples"]
    assert sum(1 for s in got if s["ms"] < 35) == 4 and len(got) == 24
    rates = [r["decode_agg_tps"] for r in doc["rows"]]
    assert 925 < min(rates) and max(rates) < 965
    assert canary.assess(got)["flagged"] == []
    slow = [dict(s) for s in got]
    slow[13]["ms"] *= 2.0
    assert canary.assess(slow)["blocks_flagged"] == [slow[13]["block"]]


def _capture(name: str) -> dict:
    import json
    from pathlib import Path

    return json.loads((Path(__file__).resolve().parents[1] / "data" / "canary" / name).read_text())


def _slow_blocks(rows: list[dict], below: float = 0.93) -> set[int]:
    """Blocks where an arm's decode_agg_tps fell under `below` x the run's median."""
    import statistics

    med = statistics.median(r["decode_agg_tps"] for r in rows)
    return {r["repeat"] for r in rows if r["decode_agg_tps"] < below * med}


def test_on_the_gpu_box_the_stretch_flags_the_probes_that_ran_beside_busy_loops_and_the_slowed_blocks():
    """H200 serving A/A, 12 blocks, with 32, 16 and 8 busy loops on 16 cores from the end of
    block 2, 5 and 8 to the end of block 3, 6 and 9 (tests/data/canary/README.md).  The loops
    were stopped ~0.2 s after the next block began, so the first probe of blocks 4 and 7 also ran
    beside them: the canary flags every probe that did and none that did not, and both blocks the
    loops slowed (-22 %, -15 %)."""
    doc = _capture("h200-aa-starved-12-blocks.json")
    got = canary.assess(doc["canary"]["samples"])
    starved = {(s["block"], s["engine"]) for s in doc["canary"]["samples"] if s["ms"] > 1.5 * s["cpu_ms"]}
    assert {(f["block"], f["engine"]) for f in got["flagged"]} == starved == {(3, "stock_b"), (4, "stock_b"), (6, "stock"), (7, "stock")}
    assert _slow_blocks(doc["rows"]) == {3, 6} and {3, 6} <= set(got["blocks_flagged"])
    assert got["median_stretch"] < 1.02 and got["threshold_pct"] == pytest.approx(15.0)  # the floor: quiet probes stretch under 1.2 %
    assert 9 not in got["blocks_flagged"]  # 8 loops on 16 cores leave every thread a core


def test_the_wall_time_alone_misses_the_slowed_blocks_where_it_runs_in_two_modes():
    """H100, the same run with the wall time only: blocks 3 and 6 lost 9-23 % of their decode
    rate, and their probes (75-96 and 36-60 ms) sit inside the quiet probes' two modes (27-52 ms)."""
    doc = _capture("h100-aa-starved-wall-12-blocks.json")
    assert _slow_blocks(doc["rows"]) == {3, 6}
    got = canary.assess(doc["canary"]["samples"])
    assert got["judged"] == "wall" and got["threshold_pct"] > 150 and got["blocks_flagged"] == []
