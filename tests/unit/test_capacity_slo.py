"""Objectives: what `--slo` accepts and refuses (one line, exit 2), and that a probe's margin to
`<quantity>_p<q>_ms=<limit>` is 0 exactly where the point's `<quantity>_p<q>_ms` of
parity.metrics.serving equals the limit (the same percentile, the same samples)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from parity.capacity.probe import Requests, from_records
from parity.capacity.slo import parse_slo
from parity.errors import UsageError
from parity.loadgen.record import RequestRecord
from parity.metrics.serving import METRICS


def test_names_with_and_without_a_percentile():
    objs = parse_slo("ttft_p99_ms=500, itl_p99.9_ms=50,tpot_ms=40", attainment=95)
    assert [(o.quantity, o.pct, o.limit_ms) for o in objs] == [("ttft", 99, 500), ("itl", 99.9, 50), ("tpot", 95, 40)]
    assert [o.name for o in objs] == ["ttft_p99_ms", "itl_p99.9_ms", "tpot_p95_ms"]


@pytest.mark.parametrize(
    "text, words",
    [
        ("", "no objective"),
        ("ttft_p99_ms", "expected"),
        ("queue_p99_ms=5", "quantity one of"),
        ("ttft_p100_ms=5", "strictly between 0 and 100"),
        ("ttft_p99_ms=abc", "not a number"),
        ("ttft_p99_ms=-1", "finite number of ms > 0"),
        ("ttft_p99_ms=inf", "finite number of ms > 0"),
        ("ttft_p99_ms=5,ttft_p99_ms=6", "named twice"),
    ],
)
def test_a_bad_objective_is_one_line_naming_it(text, words):
    with pytest.raises(UsageError) as e:
        parse_slo(text)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_a_bad_attainment_is_refused():
    with pytest.raises(UsageError, match="--attainment 100"):
        parse_slo("ttft_ms=5", attainment=100)


def records(n: int, rng) -> list[RequestRecord]:
    out = []
    for i in range(n):
        send = i * 0.05
        first = send + float(rng.uniform(0.02, 0.4))
        gaps = rng.uniform(0.005, 0.06, int(rng.integers(2, 40)))
        times = list(first + np.concatenate([[0.0], np.cumsum(gaps)]))
        out.append(RequestRecord(send=send, first=first, token_times=times, tokens=len(times), chunks=len(times)))
    return out


def test_margin_is_zero_where_the_registry_percentile_meets_the_limit():
    recs = records(300, np.random.default_rng(3))
    r = from_records(recs, warmup=0)
    for metric, quantity in (("ttft_p99_ms", "ttft"), ("itl_p99_ms", "itl"), ("itl_p50_ms", "itl")):
        value = METRICS[metric].fn(recs)
        pct = metric.split("_p")[1].split("_")[0]
        (at,) = parse_slo(f"{quantity}_p{pct}_ms={value}")
        assert at.margin(r) == pytest.approx(0.0, abs=1e-12)
        (tight,) = parse_slo(f"{quantity}_p{pct}_ms={value / 1.1}")
        assert tight.margin(r) == pytest.approx(-math.log(1.1))
        n = len(at.values(r))  # the interpolated percentile and the share within it agree to one sample
        assert at.attainment(r) >= int(pct) / 100 - 1 / n and tight.attainment(r) < int(pct) / 100


def test_warm_up_and_cool_down_are_not_measured_but_their_tokens_count():
    recs = records(50, np.random.default_rng(4))
    r = from_records(recs, warmup=5, cooldown=5)
    mid = recs[5:45]
    assert len(r.ttft_ms) == 40
    assert np.allclose(sorted(r.ttft_ms), sorted((x.first - x.send) * 1000 for x in mid))
    lo, hi = min(x.send for x in mid), max(x.end for x in mid)
    assert r.output_tokens == sum(1 for x in recs for t in x.token_times if lo < t <= hi)
    assert r.output_tokens > sum(x.tokens for x in mid)  # the warm-ups' and cool-downs' tokens in the window
    assert r.sent == 50 and r.problems == []


def test_an_invalid_measured_request_is_named():
    recs = records(10, np.random.default_rng(5))
    recs[3].error = "HTTP 500"
    r = from_records(recs, warmup=1)
    assert r.problems == ["request 3: HTTP 500"] and len(r.ttft_ms) == 8


def test_a_probe_whose_streams_came_in_one_read_has_no_user_rate():
    """vLLM on CPU beside other work: a stream's tokens in one read give a time per token of 0; its
    decode rate per user is none (nan, null in the file), not 1000 / 0."""
    import math

    import numpy as np

    def probe(tpot):
        return Requests(ttft_ms=np.array([20.0, 30.0]), itl_ms=np.array([]), tpot_ms=np.array(tpot), e2e_ms=np.array([40.0, 50.0]),
                        output_tokens=32, window_s=1.0, sent=2, seconds=1.0)
    assert math.isnan(probe([0.0, 0.0]).user_tps) and math.isnan(probe([]).user_tps)
    assert probe([4.0, 6.0]).user_tps == 200.0
