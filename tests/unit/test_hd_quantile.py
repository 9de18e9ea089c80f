"""The Harrell-Davis median beside the sample one (parity.stats.quantiles), on the H200 A/A replays' own
requests as parity wrote them (tests/data/replay/: h200-aa, h200-aa-59, h200-aa-59b, h200x2-aa-42,
h200x2-aa-147, h200x2-aa-147b, h200x2-aa-147c).  The figures were computed first by a separate script (scipy.stats.mstats.hdquantiles
per arm and block, then the t interval of the log ratios over the blocks) and are held here."""

from __future__ import annotations

import gzip
import json
import math
import statistics
from pathlib import Path

import msgspec
import pytest
from scipy.stats.mstats import hdquantiles

from parity.loadgen.record import RequestRecord
from parity.metrics import workload
from parity.metrics.registry import direction
from parity.results.model import point_rows
from parity.stats.paired import by_point
from parity.stats.quantiles import harrell_davis

REPLAY = Path(__file__).parents[1] / "data" / "replay"


def summary(name: str) -> dict:
    return json.loads(gzip.decompress((REPLAY / name / "summary.json.gz").read_bytes()))


def ttfts(row: dict) -> list[float]:
    return [v for v in row["per_request_ms"]["ttft_sched_ms"] if v is not None]


def test_it_is_scipys_harrell_davis_on_recorded_ttfts():
    row = summary("h200x2-aa-147")["rows"][0]
    for q in (0.1, 0.5, 0.9, 0.99):
        assert harrell_davis(ttfts(row), q) == pytest.approx(float(hdquantiles(ttfts(row), [q])[0]), rel=1e-12)
    assert harrell_davis([4.0], 0.5) == 4.0 and math.isnan(harrell_davis([], 0.5))
    with pytest.raises(ValueError):
        harrell_davis([1.0, 2.0], 50)


def test_the_metric_reads_the_requests_the_sample_median_reads():
    """On the 31-request A/A's request records: both medians from the same due-time latencies, and the
    sample one is the figure that run wrote."""
    doc = summary("h200-aa")
    recs = msgspec.json.decode(gzip.decompress((REPLAY / "h200-aa" / "stock-r0.json.gz").read_bytes()),
                               type=list[RequestRecord])
    got, _ = workload.compute(["ttft_sched_p50_ms", "ttft_sched_hd50_ms"], workload.Sample(recs))
    (ran,) = [r for r in doc["rows"] if r["engine"] == "stock" and r["repeat"] == 0]
    assert got["ttft_sched_p50_ms"] == pytest.approx(ran["ttft_sched_p50_ms"], abs=1e-3)
    lat = workload.sched_latency_ms(workload.Sample(recs), "first")
    assert got["ttft_sched_hd50_ms"] == pytest.approx(float(hdquantiles(lat, [0.5])[0]), abs=1e-3)  # rounded to 4 places
    assert got["ttft_sched_hd50_ms"] != pytest.approx(got["ttft_sched_p50_ms"], rel=1e-3)


def with_hd(doc: dict) -> list:
    rows = point_rows(doc["rows"])
    for r in rows:
        r.metrics.pop("gpu", None)  # the plain interval, as the runs computed it (test_stats_crossover: with the placement)
        vals = ttfts(r.info)
        assert r.metric("ttft_sched_p50_ms") == pytest.approx(statistics.median(vals), abs=1e-3)  # what the run read
        r.metrics["ttft_sched_hd50_ms"] = harrell_davis(vals, 0.5)
    return rows


def paired(doc: dict, metric: str) -> dict:
    (p,) = by_point(with_hd(doc), doc["reference_engine"], [metric], direction, 2.0, 0.95, key="point")
    return p


def test_the_147_request_aa_on_two_h200s():
    """15 blocks in crossover (docs/evidence/device-h200x2-1130b/): the sample medians' ratio read 1.018, an
    interval that leaves out 1, where the requests paired with themselves read 1.000 (median request).
    The sample median of 147 sits on a step (block 0's stock_b: ranks 71-75 read 112-131 ms); Harrell-Davis moves less."""
    doc = summary("h200x2-aa-147")
    p50, hd = paired(doc, "ttft_sched_p50_ms"), paired(doc, "ttft_sched_hd50_ms")
    assert (p50["ratio"], p50["low"], p50["high"]) == pytest.approx((1.0177, 1.0085, 1.0270), abs=1e-4)
    assert p50["outcome"] == "inconclusive" and p50["n_blocks"] == hd["n_blocks"] == 15
    assert (hd["ratio"], hd["low"], hd["high"]) == pytest.approx((1.0087, 1.0026, 1.0149), abs=1e-4)
    assert hd["outcome"] == "equivalent"


def test_the_declared_rerun_the_harrell_davis_median_did_not_hold():
    """12 blocks of the same slice and design, declared beforehand with the Harrell-Davis median as the
    stop and the verdict (docs/evidence/device-h200x2-1130c/): it spread more than the sample median this
    time and read inconclusive, where the sample median read equivalent.  The recomputed figures are
    the run's own (its rows' ttft_sched_hd50_ms, its summary's paired list)."""
    doc = summary("h200x2-aa-147b")
    p50, hd = paired(doc, "ttft_sched_p50_ms"), paired(doc, "ttft_sched_hd50_ms")
    assert hd["n_blocks"] == p50["n_blocks"] == 12
    assert (hd["ratio"], hd["low"], hd["high"]) == pytest.approx((0.9947, 0.9782, 1.0115), abs=1e-4)
    assert hd["outcome"] == "inconclusive"
    assert (p50["ratio"], p50["low"], p50["high"]) == pytest.approx((0.9991, 0.9838, 1.0147), abs=1e-4)
    assert p50["outcome"] == "equivalent"
    ran = {p["metric"]: p for p in doc["paired"]}
    assert (ran["ttft_sched_hd50_ms"]["low"], ran["ttft_sched_p50_ms"]["low"]) == pytest.approx((hd["low"], p50["low"]), abs=1e-5)


@pytest.mark.parametrize("name, sample_sd, hd_sd", [
    ("h200-aa-59", 10.53, 7.69), ("h200-aa-59b", 8.17, 7.36), ("h200x2-aa-42", 4.41, 3.63), ("h200x2-aa-147", 1.64, 1.10),
    ("h200x2-aa-147b", 2.43, 2.63), ("h200x2-aa-147c", 2.48, 2.06)])
def test_the_spread_of_both_medians_on_every_recorded_aa(name, sample_sd, hd_sd):
    """Harrell-Davis spread less on the first four, more on the fifth, less on the sixth: not a rule to judge by."""
    doc = summary(name)
    p50, hd = paired(doc, "ttft_sched_p50_ms"), paired(doc, "ttft_sched_hd50_ms")
    assert (p50["sd_log"] * 100, hd["sd_log"] * 100) == pytest.approx((sample_sd, hd_sd), abs=0.01)


@pytest.mark.parametrize("name, held, hd_over_p50", [
    ("h200-aa-59", True, 1.018), ("h200-aa-59b", True, 1.014), ("h200x2-aa-42", True, 1.021),
    ("h200x2-aa-147", False, 1.184), ("h200x2-aa-147b", False, 1.177), ("h200x2-aa-147c", False, 1.186)])
def test_past_the_servers_rate_the_harrell_davis_median_sits_well_above_the_median(name, held, hd_over_p50):
    """Past the rate the server holds, the middle of the TTFTs is where queueing starts (ranks 60-90 of
    147 run ~95 ms to ~330 ms), and Harrell-Davis's weights around the middle reach into it."""
    rows = [r for r in summary(name)["rows"] if r.get("per_request_ms")]
    assert all(bool(r["held"]) == held for r in rows)
    mean = statistics.mean(harrell_davis(ttfts(r), 0.5) / r["ttft_sched_p50_ms"] for r in rows)
    assert mean == pytest.approx(hd_over_p50, abs=5e-4)
