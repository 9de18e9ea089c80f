"""Request-paired replay ratios on the H200 A/A replays' own requests (tests/data/replay/h200-aa,
h200-aa-59): the figures were computed first by a separate script (per block the mean, or the
median, over requests of log(B/A), then scipy's t interval over the blocks) and are held here."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import msgspec
import pytest

from parity.loadgen.record import RequestRecord
from parity.results.model import point_rows
from parity.stats.paired import by_point
from parity.metrics.registry import direction
from parity.workloads import request_paired

AA = Path(__file__).parents[1] / "data" / "replay" / "h200-aa"
REPLAY = Path(__file__).parents[1] / "data" / "replay"
AA59 = REPLAY / "h200-aa-59"


def records(engine: str, block: int) -> list[RequestRecord]:
    return msgspec.json.decode(gzip.decompress((AA / f"{engine}-r{block}.json.gz").read_bytes()), type=list[RequestRecord])


def rows_with_requests() -> list:
    rows = point_rows(json.loads(gzip.decompress((AA / "summary.json.gz").read_bytes()))["rows"])
    for r in rows:
        r.info["per_request_ms"] = request_paired.per_request(records(r.engine, r.repeat))
    return rows


def test_per_request_values_follow_the_schedule():
    recs = records("stock", 0)
    got = request_paired.per_request(recs)
    assert len(got["ttft_sched_ms"]) == len(got["tpot_ms"]) == 31
    assert got["ttft_sched_ms"][0] == pytest.approx((recs[0].first - recs[0].scheduled) * 1000, abs=1e-3)
    assert got["tpot_ms"][0] == pytest.approx((recs[0].end - recs[0].first) * 1000 / (recs[0].tokens - 1), abs=1e-3)
    recs[3].invalid = "planted"
    assert request_paired.per_request(recs)["ttft_sched_ms"][3] is None


def test_the_ab_replay_pairs_each_request_with_itself():
    rows = rows_with_requests()
    pairs = {(p["quantity"], p["statistic"]): p for p in request_paired.summary(rows, "stock", 2.0, 0.95)}
    ttft, tpot = pairs["ttft_sched_ms", "gmean"], pairs["tpot_ms", "gmean"]
    assert ttft["n_blocks"] == tpot["n_blocks"] == 5 and ttft["engine"] == "stock_b"
    assert (ttft["ratio"], ttft["low"], ttft["high"]) == pytest.approx((1.0154, 0.9864, 1.0453), abs=1e-4)
    assert (tpot["ratio"], tpot["low"], tpot["high"]) == pytest.approx((1.0013, 0.9529, 1.0521), abs=1e-4)
    assert ttft["outcome"] == tpot["outcome"] == "inconclusive"
    # the block p50s of the same run read a change on an A/A: the coarse statistic this one is beside
    (p50,) = [p for p in by_point(rows, "stock", ["ttft_sched_p50_ms"], direction, 2.0, 0.95, key="point")]
    assert p50["outcome"] == "regressed" and p50["low"] > 1
    med, med_tpot = pairs["ttft_sched_ms", "median"], pairs["tpot_ms", "median"]
    assert (med["ratio"], med["low"], med["high"]) == pytest.approx((1.0046, 0.9805, 1.0292), abs=1e-4)
    assert (med_tpot["ratio"], med_tpot["low"], med_tpot["high"]) == pytest.approx((1.0020, 0.9611, 1.0446), abs=1e-4)
    line = request_paired.lines([med])[0]
    assert line.startswith("request-paired stock_b/stock 1x: 31 requests over 19.9 s") and "(median request)" in line
    table = request_paired.table([ttft, med], lambda v: f"{v:.4f}")
    assert [r[3:7] for r in table["rows"]] == [
        ["TTFT from the due time", "geometric mean", "1.0154 [0.9864, 1.0453]", "inconclusive"],
        ["TTFT from the due time", "median request", "1.0046 [0.9805, 1.0292]", "inconclusive"]]


def test_the_59_request_replay_as_parity_wrote_it():
    """The second A/A (8 blocks of 59 requests), from the rows' per_request_ms as the run wrote them:
    the geometric mean as that run's own summary read it; the median request half as wide."""
    summary = json.loads(gzip.decompress((AA59 / "summary.json.gz").read_bytes()))
    got = {(p["quantity"], p["statistic"]): p
           for p in request_paired.summary(point_rows(summary["rows"]), "stock", 2.0, 0.95)}
    (ran,) = [p for p in summary["request_paired"] if p["quantity"] == "ttft_sched_ms"]
    want = {("ttft_sched_ms", "gmean"): (ran["ratio"], ran["low"], ran["high"]),
            ("ttft_sched_ms", "median"): (1.0031, 0.9857, 1.0209), ("tpot_ms", "median"): (0.9999, 0.9932, 1.0066)}
    for key, fig in want.items():
        assert (got[key]["ratio"], got[key]["low"], got[key]["high"]) == pytest.approx(fig, abs=1e-4), key
    assert got["ttft_sched_ms", "gmean"]["half_width_pct"] > 1.6 * got["ttft_sched_ms", "median"]["half_width_pct"]
    assert got["tpot_ms", "median"]["outcome"] == "equivalent"


def test_a_block_whose_prompts_differ_is_not_paired():
    rows = rows_with_requests()
    for r in rows:
        if r.engine == "stock_b" and r.repeat == 0:
            r.info["prompt_digest"] = "another"
    pairs = request_paired.summary(rows, "stock", 2.0, 0.95)
    assert {p["n_blocks"] for p in pairs} == {4} and len(pairs) == 4
    assert request_paired.summary(rows, None, 2.0, 0.95) == []


def test_a_ratio_of_two_zero_hit_rates_is_missing_not_within_noise():
    """The 59-request A/A's cold-cache rows read server_hit_rate 0.0 in both arms: no ratio, so the
    users' rule cannot judge it.  Its headline said "server_hit_rate -x (within noise)"."""
    from parity import stats
    from parity.serving import summary as serving_summary

    doc = json.loads(gzip.decompress((AA59 / "summary.json.gz").read_bytes()))
    rows = point_rows(doc["rows"])
    metrics = ["ttft_sched_p50_ms", "tpot_p50_ms", "server_hit_rate"]
    assert {r.metric("server_hit_rate") for r in rows} == {0.0}
    med = serving_summary.medians(rows, metrics, metrics)
    (rat,) = serving_summary.ratios(rows, med, "stock", stats.Rule(), metrics)
    hit = rat.verdicts["server_hit_rate"]
    assert hit.verdict == stats.MISSING and "control median is 0" in hit.reason
    assert rat.verdicts["tpot_p50_ms"].verdict == stats.NOISE


def test_the_headline_and_the_paired_row_say_why_two_zero_hit_rates_have_no_ratio():
    """The two-H200 A/A (h200x2-aa-147c) read the hit rate 0.0 in every row of both arms: its headline
    said "server_hit_rate -x (missing)" and its paired row "no block has both arms", as if the server
    had not answered.  Now each says what it is."""
    from parity.serving.workload_summary import headline
    from parity.serving import summary as serving_summary
    from parity import stats

    doc = json.loads(gzip.decompress((REPLAY / "h200x2-aa-147c" / "summary.json.gz").read_bytes()))
    rows = point_rows(doc["rows"])
    assert {r.metric("server_hit_rate") for r in rows} == {0.0} and len(rows) == 28
    metrics = ["ttft_sched_p50_ms", "tpot_p50_ms", "server_hit_rate"]
    med = serving_summary.medians(rows, metrics, metrics)
    rat = serving_summary.ratios(rows, med, "stock", stats.Rule(), metrics)
    for r in rat:
        r.put("point", doc["ratios"][0]["point"])
    line = headline(rat, "trace")
    assert "server_hit_rate -x (missing: control median is 0)" in line
    assert "tpot_p50_ms 0.9973x (within noise; paired equivalent [0.9946, 1.0047])" in line
    (hit,) = by_point(rows, "stock", ["server_hit_rate"], direction, key="point")
    assert hit["reason"] == "no block has a ratio: in each of the 14 blocks with both arms a value is 0 or out of range"
    assert hit["outcome"] == "inconclusive" and hit["ratio"] is None


def test_until_ci_names_each_pairing_by_its_quantity_and_statistic():
    """What --until-ci request_ttft_median=2 waits on: the stop form of that pairing, read on the
    59-request A/A's rows as the trace kind's stop_widths gives it after the run's 8 blocks."""
    from parity.workloads.trace import KIND

    summary = json.loads(gzip.decompress((AA59 / "summary.json.gz").read_bytes()))
    widths = KIND.stop_widths(summary["rows"], "stock", 2.0, 0.95)
    point = "stock_b 1.5x: 59 requests over 19.8 s, cold: a fresh server"
    assert set(widths) == {f"{point} {m}" for m in KIND.stop_metrics}
    assert set(KIND.stop_metrics) == {"request_ttft_gmean", "request_ttft_median", "request_tpot_gmean",
                                      "request_tpot_median"}
    (ran,) = [p for p in summary["request_paired"] if p["quantity"] == "ttft_sched_ms"]
    assert widths[f"{point} request_ttft_gmean"] == pytest.approx(ran["stop_half_width_pct"], abs=1e-6)
    assert widths[f"{point} request_ttft_median"] < 2.9 < widths[f"{point} request_ttft_gmean"]


def test_a_hit_rate_lost_reads_0x_and_one_gained_from_zero_has_no_ratio():
    """The 147c A/A's rows with stock's hit rate set to 0.37 (a Mooncake slice's) and stock_b's left
    at 0: stock_b lost the cache, 0x and regressed, where the ratio once read "-" as if missing.  The
    other way round there is no ratio over 0, and the users' rule says missing."""
    from parity import stats
    from parity.serving import summary as serving_summary

    doc = json.loads(gzip.decompress((REPLAY / "h200x2-aa-147c" / "summary.json.gz").read_bytes()))
    for cached, expect in (("stock", 0.0), ("stock_b", None)):
        rows = point_rows(doc["rows"])
        for r in rows:
            if r.engine == cached:
                r.metrics["server_hit_rate"] = 0.37
        metrics = ["server_hit_rate"]
        (rat,) = serving_summary.ratios(rows, serving_summary.medians(rows, metrics, metrics), "stock",
                                        stats.Rule(), metrics)
        assert rat.metric("server_hit_rate") == expect
        want = stats.REGRESSED if expect == 0.0 else stats.MISSING
        assert rat.verdicts["server_hit_rate"].verdict == want
