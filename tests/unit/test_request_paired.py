"""Request-paired replay ratios on the H200 A/A replay's own requests (tests/data/replay/h200-aa):
the figures were computed first by a separate script (per block the mean over requests of
log(B/A), then scipy's t interval over the 5 blocks) and are held here."""

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
    pairs = {p["quantity"]: p for p in request_paired.summary(rows, "stock", 2.0, 0.95)}
    ttft, tpot = pairs["ttft_sched_ms"], pairs["tpot_ms"]
    assert ttft["n_blocks"] == tpot["n_blocks"] == 5 and ttft["engine"] == "stock_b"
    assert (ttft["ratio"], ttft["low"], ttft["high"]) == pytest.approx((1.0154, 0.9864, 1.0453), abs=1e-4)
    assert (tpot["ratio"], tpot["low"], tpot["high"]) == pytest.approx((1.0013, 0.9529, 1.0521), abs=1e-4)
    assert ttft["outcome"] == tpot["outcome"] == "inconclusive"
    # the block p50s of the same run read a change on an A/A: the coarse statistic this one is beside
    (p50,) = [p for p in by_point(rows, "stock", ["ttft_sched_p50_ms"], direction, 2.0, 0.95, key="point")]
    assert p50["outcome"] == "regressed" and p50["low"] > 1
    assert request_paired.lines([ttft])[0].startswith("request-paired stock_b/stock 1x: 31 requests over 19.9 s")
    table = request_paired.table([ttft, tpot], lambda v: f"{v:.4f}")
    assert [r[3:6] for r in table["rows"]] == [["TTFT from the due time", "1.0154 [0.9864, 1.0453]", "inconclusive"],
                                               ["TPOT", "1.0013 [0.9529, 1.0521]", "inconclusive"]]


def test_a_block_whose_prompts_differ_is_not_paired():
    rows = rows_with_requests()
    for r in rows:
        if r.engine == "stock_b" and r.repeat == 0:
            r.info["prompt_digest"] = "another"
    pairs = request_paired.summary(rows, "stock", 2.0, 0.95)
    assert {p["n_blocks"] for p in pairs} == {4}
    assert request_paired.summary(rows, None, 2.0, 0.95) == []
