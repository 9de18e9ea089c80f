"""The bisection proper (parity.bisect.search): every culprit position of several series sizes
is found within ceil(log2 n) + 1 probes (the known-bad endpoint counted); an endpoint that is
not bad, or an undecided probe, ends it without a culprit (it never guesses)."""

from __future__ import annotations

import math

import pytest

from parity.bisect import search


def _probe_for(culprit: int, undecided: set[int] = frozenset(), seen: list | None = None):
    def probe(k: int) -> search.Probe:
        if seen is not None:
            seen.append(k)
        v = search.UNDECIDED if k in undecided else (search.BAD if k >= culprit else search.GOOD)
        return search.Probe(0, "", k, "", v, f"state {k}")

    return probe


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 46, 47, 100])
def test_every_culprit_found_within_the_bound(n):
    labels = [f"s{k}" for k in range(n + 1)]
    for culprit in range(1, n + 1):
        seen: list[int] = []
        out = search.bisect(n, labels, _probe_for(culprit, seen=seen))
        assert out.culprit == culprit, (n, culprit, seen)
        assert out.counted == len(seen) <= math.ceil(math.log2(n)) + 1 if n > 1 else out.counted == 1
        assert seen[0] == n and out.probes[0].role == "endpoint" and {p.role for p in out.probes[1:]} <= {"bisect"}
        assert [p.n for p in out.probes] == list(range(1, len(seen) + 1))
    assert search.bound(47) == 7 and search.bound(46) == 7 and search.bound(32) == 6


def test_bad_endpoint_that_is_good_stops_with_the_reason():
    out = search.bisect(10, [f"p{k}" for k in range(11)], _probe_for(11))
    assert out.culprit is None and out.counted == 1
    assert out.reason == "the bad endpoint p10 is not bad (state 10): nothing to bisect"


def test_undecided_probe_stops_and_names_the_open_range():
    out = search.bisect(16, [f"p{k}" for k in range(17)], _probe_for(5, undecided={8}))
    assert out.culprit is None
    assert out.reason == "could not decide p8 (state 8): the first bad state lies in p1..p16"


def test_verify_good_probes_the_reference_first_and_does_not_count_it():
    seen: list[int] = []
    out = search.bisect(6, [f"c{k}" for k in range(7)], _probe_for(4, seen=seen), verify_good=True)
    assert seen[0] == 0 and out.probes[0].role == "reference" and out.probes[0].n == 0
    assert out.culprit == 4 and out.counted == len(seen) - 1 <= search.bound(6)
    bad_good = search.bisect(6, [f"c{k}" for k in range(7)], _probe_for(0), verify_good=True)
    assert bad_good.culprit is None and bad_good.reason.startswith("the good endpoint c0 is not good")


def test_probe_log_table():
    out = search.bisect(4, ["stock", "0001-a.patch", "0002-b.patch", "0003-c.patch", "0004-d|e.patch"], _probe_for(3))
    out.probes[0].build = {"cached": False, "seconds": 12.4}
    out.probes[1].build = {"cached": True, "seconds": 0.1}
    md = search.markdown(out.probes)
    assert md.splitlines()[0] == "| probe | role | state | build | result | verdict |"
    assert "| 1 | endpoint | 0004-d\\|e.patch | built 12 s | state 4 | bad |" in md
    assert "| 2 | bisect | 0002-b.patch | cached | state 2 | good |" in md
    assert search.tsv(out.probes).splitlines()[3].split("\t") == ["3", "bisect", "0003-c.patch", "-", "state 3", "bad"]


def test_metric_verdict_is_regressed_or_not_slower_than_the_rule():
    """A metric probe: bad when paired-regressed beyond the threshold; good when the interval's low
    end shows it is not slower than 1/(1 + t) (non-inferiority: a faster probe is good too); else
    undecided, which asks for more blocks."""
    from parity.bisect.probe import metric_verdict
    from parity.stats.paired import paired

    def point(good, probe):
        return paired(dict(enumerate(good)), dict(enumerate(probe)), "higher", threshold_pct=40).to_dict()

    slow = point([300, 320, 310], [40, 41, 39])
    assert slow["outcome"] == "regressed" and metric_verdict([slow], 40) == "bad"
    same = point([300, 330, 310, 290, 305], [310, 320, 300, 300, 315])
    assert metric_verdict([same], 40) == "good"
    faster = point([300, 320, 310], [600, 640, 590])
    assert faster["outcome"] == "improved" and metric_verdict([faster], 40) == "good"
    noisy = point([300, 900, 250], [320, 200, 700])
    assert noisy["low"] < 1 / 1.4 and metric_verdict([noisy], 40) == "undecided"
    assert metric_verdict([same, slow], 40) == "bad" and metric_verdict([], 40) == "undecided"
