"""The named length mixtures (parity.replay.mixtures) against the samples they were fitted to:
fitting again gives the stored parameters, each mixture's quantiles are the sample's own
within 15 % from p10 to p90, and draws are seeded and clipped to a request's context."""

from __future__ import annotations

from pathlib import Path

import pytest

from parity.errors import UsageError
from parity.replay.formats import read_trace
from parity.replay.mixtures import MIXTURES, draw, fit, mixture, quantile
from parity.stats import percentile

DATA = Path(__file__).resolve().parents[1] / "data" / "replay"
QUANTILES = (10, 25, 50, 75, 90)


def lengths(name: str) -> tuple[list[int], list[int]]:
    t = read_trace(DATA / MIXTURES[name].sample)
    return [r.input_tokens for r in t.requests], [r.output_tokens for r in t.requests]


@pytest.mark.parametrize("name", sorted(MIXTURES))
def test_fitting_the_sample_again_gives_the_stored_mixture(name):
    m = MIXTURES[name]
    ins, outs = lengths(name)
    assert len(ins) == m.requests
    for got, stored in ((fit(ins), m.input), (fit(outs), m.output)):
        assert len(got) == len(stored)
        for a, b in zip(got, stored):
            assert (a.weight, a.mu, a.sigma) == pytest.approx((b.weight, b.mu, b.sigma), abs=1e-4)


@pytest.mark.parametrize("name", sorted(MIXTURES))
def test_each_mixture_has_its_samples_quantiles(name):
    m = MIXTURES[name]
    ins, outs = lengths(name)
    for comps, values in ((m.input, ins), (m.output, outs)):
        for q in QUANTILES:
            want, got = percentile(values, q), quantile(comps, q / 100)
            assert got == pytest.approx(want, rel=0.15), (name, q, want, got)


def test_draws_are_seeded_and_clipped_to_the_context():
    m = mixture("mooncake-conv")
    a, clipped = draw(m, 500, seed=3, limit=8192)
    assert draw(m, 500, seed=3, limit=8192) == (a, clipped) and draw(m, 500, seed=4, limit=8192)[0] != a
    assert all(i + o <= 8192 and i >= 1 and o >= 1 for i, o in a)
    assert 0 < clipped < 500  # mooncake's inputs (p50 12k) often exceed 8k: clipped, and counted
    free, none = draw(m, 4000, seed=3)
    assert none == 0
    assert percentile([i for i, _ in free], 50) == pytest.approx(quantile(m.input, 0.5), rel=0.1)


def test_an_unknown_mixture_names_the_known_ones():
    want = "no length mixture 'sharegpt' \\(known: azure-code, azure-conv, mooncake-conv\\)"
    with pytest.raises(UsageError, match=want):
        mixture("sharegpt")
