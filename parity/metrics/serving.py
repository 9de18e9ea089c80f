"""Serving metrics, each declared once: name, unit, direction, the formula in
words and the function that computes it.  Reports print these definitions
(parity.metrics.registry), so numbers and their meaning never drift apart.

The users' own h2h client (h2h_cli3.py, the GB10 harness's `n<N>.json` rows;
docs/GB10_PARITY_PHASE0_RESULTS.md) defines agg_tps, decode_agg_tps, decode_perseq_tps,
prefill_tps, ttft_mean_ms, wall_s, gen_total, prompt_tok_total.  Every other quantity has its
own name.  Each declaration also carries the metric's roles (Metric: the verdict's headline,
the results tables' columns, the users' summary.tsv columns, how rounds combine); every reader
asks parity.metrics.registry for them instead of keeping its own list.

A metric reads the records it is given; the point's validity (which records
count, whether the point counts at all) is decided in parity.metrics.validity.
A metric that cannot be computed raises NoValue with the reason, and the row
carries that reason instead of an empty cell."""

from __future__ import annotations

import math
from typing import Callable, Sequence

import msgspec

from parity.loadgen.record import RequestRecord
from parity.stats import percentile

class NoValue(Exception):
    """A metric that cannot be computed from these records; the message says why."""


def _need(rs) -> list[RequestRecord]:
    rs = [r for r in rs if r.first is not None and r.end is not None]
    if not rs:
        raise NoValue("no request produced a token")
    return rs


def _rate(tokens: float, seconds: float, what: str) -> float:
    if seconds <= 0:
        raise NoValue(f"{what} is {seconds * 1000:.3f} ms: no interval to divide by (tokens arrived in one read)")
    return tokens / seconds


def gen_total(rs) -> float:
    return sum(r.tokens for r in rs)


def prompt_tok_total(rs) -> float:
    return sum(r.prompt_tokens if r.prompt_tokens is not None else r.sent_prompt_tokens for r in rs)


def wall_s(rs) -> float:
    rs = _need(rs)
    return max(r.end for r in rs) - min(r.send for r in rs)


def agg_tps(rs) -> float:
    return _rate(gen_total(_need(rs)), wall_s(rs), "wall_s")


def decode_window_s(rs) -> float:
    rs = _need(rs)
    return max(r.end for r in rs) - max(r.first for r in rs)


def decode_window_reads(rs) -> int:
    """Distinct arrival instants after the last first token: the reads that carried the decode
    window's tokens (far fewer than its token gaps: the stream came in bursts)."""
    rs = _need(rs)
    lo = max(r.first for r in rs)
    return len({t for r in rs for t in r.token_times if t > lo})


def decode_agg_tps(rs) -> float:
    rs = _need(rs)
    return _rate(gen_total(rs), decode_window_s(rs), "the decode window (last first token -> last token)")


def decode_perseq_tps(rs) -> float:
    rs = [r for r in _need(rs) if r.tokens > 1]
    rates = [(r.tokens - 1) / (r.end - r.first) for r in rs if r.end > r.first]
    if not rates:
        raise NoValue("no request has two tokens in different reads")
    return sum(rates) / len(rates)


def ttft_ms(rs) -> list[float]:
    return [(r.first - r.send) * 1000 for r in _need(rs)]


def prefill_tps(rs) -> float:
    return _rate(prompt_tok_total(_need(rs)), max(ttft_ms(rs)) / 1000, "the longest TTFT")


def steady_decode_tps(rs) -> float:
    """Tokens that arrived while every request was past its first token and none had
    finished, over that interval: the batch's pure decode rate."""
    rs = _need(rs)
    lo, hi = max(r.first for r in rs), min(r.end for r in rs)
    if hi <= lo:
        raise NoValue("no interval in which every request was decoding "
                      "(a request finished before the last one started)")
    n = sum(1 for r in rs for t in r.token_times if lo < t <= hi)
    return _rate(n, hi - lo, "the all-decoding interval")


def itl_ms(rs) -> list[float]:
    """Per-token gaps: a chunk that carries k tokens after a gap g gives k gaps of g/k."""
    out: list[float] = []
    for r in _need(rs):
        t = r.token_times
        i = 1
        while i < len(t):
            j = i
            while j + 1 < len(t) and t[j + 1] == t[i]:
                j += 1
            k = j - i + 1
            out += [(t[i] - t[i - 1]) * 1000 / k] * k
            i = j + 1
    return out


def tpot_ms(rs) -> float:
    vals = [t for r in _need(rs) if (t := r.tpot_ms) is not None]
    if not vals:
        raise NoValue("no request generated two tokens")
    return sum(vals) / len(vals)


def _mean(values: Sequence[float]) -> float:
    if not values:
        raise NoValue("no values")
    return sum(values) / len(values)


def _pct(values: Sequence[float], q: float) -> float:
    if not values:
        raise NoValue("no values")
    return percentile(values, q)


class Metric(msgspec.Struct, frozen=True):  # not a dataclass: that class costs every start ~0.5 ms to create
    """A metric and its roles; the roles' orders are ranks (1 first), None: not in that role."""

    name: str
    unit: str
    better: str  # "higher" | "lower"
    formula: str
    fn: Callable
    headline: int | None = None  # the verdict's metrics: stats.metrics' default, a sweep's ratios and spreads
    column: int | None = None  # the report's results table (medians of valid repeats)
    console: bool = False  # ... also `parity snapshot`'s own table and its definitions
    compared: bool = False  # ... also set engine against engine and host against host (ratio table, matrix)
    users: int | None = None  # the users' summary.tsv: its column after arm, n (their write_summary)
    users_ratio: str | None = None  # their ratio block's column: <engine>_<this>_over_<reference>
    per_round: bool = False  # a point of several rounds: the mean over rounds (else over all its requests)


METRICS: dict[str, Metric] = {
    m.name: m
    for m in [
        Metric("gen_total", "tok", "higher",
               "generated tokens of the point's requests, counted from the stream (not the server's claim)",
               gen_total, column=9, per_round=True),
        Metric("prompt_tok_total", "tok", "higher",
               "prompt tokens of the point's requests (usage.prompt_tokens, which must equal what was sent)",
               prompt_tok_total, column=8, per_round=True),
        Metric("wall_s", "s", "lower", "last token arrival - first request send, over the point's requests",
               wall_s, column=6, console=True, users=6, per_round=True),
        Metric("agg_tps", "tok/s", "higher", "gen_total / wall_s (h2h agg_tps)",
               agg_tps, headline=3, column=3, console=True, compared=True, users=1, users_ratio="agg", per_round=True),
        Metric("decode_agg_tps", "tok/s", "higher",
               "gen_total / (last token arrival - LAST first-token arrival) (h2h decode_agg_tps: every generated "
               "token, those of early requests made while later ones were still in prefill included, over the window "
               "from the last first token; the users' recorded rows fit it exactly)",
               decode_agg_tps,
               headline=1, column=1, console=True, compared=True, users=2, users_ratio="decode", per_round=True),
        Metric("decode_perseq_tps", "tok/s", "higher",
               "mean over requests of (tokens - 1) / (its last token - its first token) (h2h decode_perseq_tps)",
               decode_perseq_tps, headline=2, column=2, console=True, compared=True, users=3, users_ratio="perseq"),
        Metric("prefill_tps", "tok/s", "higher", "prompt_tok_total / the longest TTFT (h2h prefill_tps)",
               prefill_tps, column=4, console=True, compared=True, users=4, per_round=True),
        Metric("ttft_mean_ms", "ms", "lower", "mean over requests of (first token arrival - send) (h2h ttft_mean_ms)",
               lambda rs: _mean(ttft_ms(rs)),
               headline=4, column=5, console=True, compared=True, users=5, users_ratio="ttft"),
        Metric("ttft_max_ms", "ms", "lower", "longest (first token arrival - send) (h2h ttft_max_ms)",
               lambda rs: max(ttft_ms(rs)), per_round=True),
        Metric("ttft_p50_ms", "ms", "lower", "median of (first token arrival - send)",
               lambda rs: _pct(ttft_ms(rs), 50)),
        Metric("ttft_p99_ms", "ms", "lower", "99th percentile of (first token arrival - send)",
               lambda rs: _pct(ttft_ms(rs), 99)),
        Metric("decode_window_s", "s", "higher",
               "last token arrival - last first-token arrival: the interval decode_agg_tps divides by",
               decode_window_s, column=7, console=True, per_round=True),
        Metric("steady_decode_tps", "tok/s", "higher",
               "tokens arriving while every request decodes (last first token -> first request end) / that interval",
               steady_decode_tps, per_round=True),
        Metric("tpot_ms", "ms", "lower", "mean over requests of (its last token - its first token) / (tokens - 1)",
               tpot_ms),
        Metric("itl_p50_ms", "ms", "lower",
               "median per-token gap (a chunk carrying k tokens after a gap g counts k gaps of g/k)",
               lambda rs: _pct(itl_ms(rs), 50)),
        Metric("itl_p99_ms", "ms", "lower", "99th percentile per-token gap (as itl_p50_ms)",
               lambda rs: _pct(itl_ms(rs), 99)),
    ]
}


def _round(x) -> float | int | None:
    if isinstance(x, int):
        return x
    return round(x, 4) if isinstance(x, float) and math.isfinite(x) else None


def compute(records: Sequence[RequestRecord], names: Sequence[str] | None = None) -> tuple[dict, dict]:
    """(row, why): every metric's value over these records, and for each one that has
    none, the reason."""
    row, why = {}, {}
    for name, m in METRICS.items():
        if names is not None and name not in names:
            continue
        try:
            row[name] = _round(m.fn(records))
        except NoValue as e:
            row[name], why[name] = None, str(e)
    return row, why
