"""Input/output length mixtures by name, fitted to the published samples (tests/data/replay),
for workloads that draw request lengths instead of a fixed PTOK/GEN.

Each length (input, output: fitted apart, their correlation not kept) is a mixture of
lognormals: weights w_k, and mu_k, sigma_k of ln(tokens).  `fit` is EM on ln(tokens) from a
deterministic start (the components' means at evenly spaced quantiles), 1 to 3 components,
the count with the lowest BIC; the parameters below are its output on each sample (a unit
test fits again and compares, and holds each mixture's quantiles to the sample's own).
A draw is clipped to the context a request gets: output to at most half of it, then input to
the rest (drawn lengths are rounded, at least 1 token)."""

from __future__ import annotations

import math
import random
from typing import Sequence

import msgspec

from parity.errors import UsageError


class Component(msgspec.Struct, frozen=True):
    weight: float
    mu: float  # mean of ln(tokens)
    sigma: float  # standard deviation of ln(tokens)


class Mixture(msgspec.Struct, frozen=True):
    name: str
    sample: str  # the file under tests/data/replay it was fitted to
    requests: int  # rows fitted
    input: tuple[Component, ...]
    output: tuple[Component, ...]


MIN_SIGMA = 0.05


def _pdf(x: float, c: Component) -> float:
    return math.exp(-0.5 * ((x - c.mu) / c.sigma) ** 2) / (c.sigma * math.sqrt(2 * math.pi))


def _em(xs: list[float], k: int, iters: int) -> tuple[tuple[Component, ...], float]:
    """(components, log-likelihood) of k lognormals on ln values xs."""
    s = sorted(xs)
    n = len(s)
    spread = max(MIN_SIGMA, (s[-1] - s[0]) / (2 * k))
    comps = [Component(1.0 / k, s[min(n - 1, int((j + 0.5) * n / k))], spread) for j in range(k)]
    ll = -math.inf
    for _ in range(iters):
        resp = []
        ll_new = 0.0
        for x in xs:
            p = [c.weight * _pdf(x, c) for c in comps]
            tot = sum(p) or 1e-300
            ll_new += math.log(tot)
            resp.append([v / tot for v in p])
        new = []
        for j in range(k):
            r = [row[j] for row in resp]
            w = sum(r)
            if w < 1e-9:
                new.append(comps[j])
                continue
            mu = sum(ri * x for ri, x in zip(r, xs)) / w
            var = sum(ri * (x - mu) ** 2 for ri, x in zip(r, xs)) / w
            new.append(Component(w / n, mu, max(MIN_SIGMA, math.sqrt(var))))
        comps = new
        if abs(ll_new - ll) < 1e-9 * max(1.0, abs(ll_new)):
            ll = ll_new
            break
        ll = ll_new
    return tuple(comps), ll


def fit(lengths: Sequence[int], max_components: int = 3, iters: int = 500) -> tuple[Component, ...]:
    """A lognormal mixture of 1..max_components components, the count by BIC (see the module)."""
    xs = [math.log(v) for v in lengths if v > 0]
    if len(xs) < 2:
        raise UsageError("a length mixture needs at least two positive lengths")
    best = None
    for k in range(1, max_components + 1):
        comps, ll = _em(xs, k, iters)
        bic = (3 * k - 1) * math.log(len(xs)) - 2 * ll
        if best is None or bic < best[0]:
            best = (bic, comps)
    return tuple(Component(round(c.weight, 6), round(c.mu, 6), round(c.sigma, 6)) for c in best[1])


def cdf(comps: Sequence[Component], tokens: float) -> float:
    if tokens <= 0:
        return 0.0
    x = math.log(tokens)
    below = sum(c.weight * 0.5 * (1 + math.erf((x - c.mu) / (c.sigma * math.sqrt(2)))) for c in comps)
    return below / sum(c.weight for c in comps)


def quantile(comps: Sequence[Component], q: float) -> float:
    """The length below which a share q of draws falls (bisection on ln tokens)."""
    lo = min(c.mu - 8 * c.sigma for c in comps)
    hi = max(c.mu + 8 * c.sigma for c in comps)
    for _ in range(100):
        mid = (lo + hi) / 2
        if cdf(comps, math.exp(mid)) < q:
            lo = mid
        else:
            hi = mid
    return math.exp((lo + hi) / 2)


def _one(comps: Sequence[Component], rng: random.Random) -> int:
    u, acc = rng.random() * sum(c.weight for c in comps), 0.0
    pick = comps[-1]
    for c in comps:
        acc += c.weight
        if u <= acc:
            pick = c
            break
    return max(1, round(math.exp(rng.gauss(pick.mu, pick.sigma))))


def draw(mix: Mixture, n: int, seed: int, limit: int | None = None) -> tuple[list[tuple[int, int]], int]:
    """n (input, output) pairs, seeded; clipped to `limit` tokens a request (see the module);
    and how many were clipped."""
    rng = random.Random(f"parity mixture {mix.name} {seed}")
    out, clipped = [], 0
    for _ in range(n):
        i, o = _one(mix.input, rng), _one(mix.output, rng)
        if limit is not None and i + o > limit:
            clipped += 1
            o = max(1, min(o, limit // 2))
            i = max(1, min(i, limit - o))
        out.append((i, o))
    return out, clipped


def _c(*rows: tuple[float, float, float]) -> tuple[Component, ...]:
    return tuple(Component(*r) for r in rows)


# fitted by fit() to the samples (tests/unit/test_replay_mixtures.py fits again and compares)
MIXTURES: dict[str, Mixture] = {
    m.name: m
    for m in [
        Mixture("azure-code", "azure-code-2023.csv", 300,
                input=_c((0.358887, 5.316872, 0.99005), (0.573855, 7.687275, 0.593252), (0.067258, 8.893809, 0.05)),
                output=_c((0.797117, 2.416675, 0.422263), (0.202883, 3.783696, 0.902058))),
        Mixture("azure-conv", "azure-conv-2023.csv", 300,
                input=_c((0.222529, 6.040695, 1.849245), (0.274439, 5.515424, 0.422258),
                         (0.503033, 6.971634, 0.115632)),
                output=_c((0.443112, 4.605122, 0.883544), (0.157812, 5.206738, 0.139626), (0.399075, 6.009522, 0.05))),
        Mixture("mooncake-conv", "mooncake-conversation.jsonl", 252,
                input=_c((0.728874, 9.058842, 1.175016), (0.271126, 9.780867, 0.401182)),
                output=_c((0.180265, 3.956648, 1.756339), (0.258366, 5.648147, 0.383615),
                          (0.561368, 6.243461, 0.230553))),
    ]
}


def mixture(name: str) -> Mixture:
    if name not in MIXTURES:
        raise UsageError(f"no length mixture {name!r} (known: {', '.join(MIXTURES)})")
    return MIXTURES[name]
