"""Serving metrics, each declared once: name, unit, direction, the formula in
words, and the function that computes it.  Reports print these definitions."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence


@dataclass
class RequestRecord:
    send: float  # perf_counter seconds
    first: float | None = None  # first token chunk
    arrivals: list[float] | None = None  # every token chunk's arrival
    prompt_tokens: int = 0
    completion_tokens: int = 0  # from the usage chunk
    expected_tokens: int = 0
    error: str | None = None
    server_timings: dict | None = None  # llama-server's own "timings"

    @property
    def valid(self) -> bool:
        return self.error is None and self.first is not None and self.completion_tokens == self.expected_tokens

    @property
    def last(self) -> float | None:
        return self.arrivals[-1] if self.arrivals else None


def _pct(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    v = sorted(values)
    k = (len(v) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _valid(rs):
    return [r for r in rs if r.valid]


def wall_s(rs):
    v = _valid(rs)
    return max(r.last for r in v) - min(r.send for r in v) if v else math.nan


def agg_tps(rs):
    w = wall_s(rs)
    return sum(r.completion_tokens for r in _valid(rs)) / w if w and w > 0 else math.nan


def decode_agg_tps(rs):
    tot = 0.0
    for r in _valid(rs):
        n = len(r.arrivals)
        if n > 1 and r.last > r.first:
            tot += (n - 1) / (r.last - r.first)
    return tot if _valid(rs) else math.nan


def prefill_tps(rs):
    v = _valid(rs)
    if not v:
        return math.nan
    span = max(r.first for r in v) - min(r.send for r in v)
    return sum(r.prompt_tokens for r in v) / span if span > 0 else math.nan


def _ttft_ms(rs):
    return [(r.first - r.send) * 1000 for r in _valid(rs)]


def _itl_ms(rs):
    out = []
    for r in _valid(rs):
        a = r.arrivals
        out += [(a[i] - a[i - 1]) * 1000 for i in range(1, len(a))]
    return out


def tpot_ms(rs):
    vals = [(r.last - r.first) * 1000 / (len(r.arrivals) - 1) for r in _valid(rs) if len(r.arrivals) > 1]
    return sum(vals) / len(vals) if vals else math.nan


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    better: str  # "higher" | "lower"
    formula: str
    fn: Callable


METRICS: dict[str, Metric] = {
    m.name: m
    for m in [
        Metric("wall_s", "s", "lower", "last token arrival - first request send, over all requests of the batch", wall_s),
        Metric("agg_tps", "tok/s", "higher", "total generated tokens / wall_s", agg_tps),
        Metric("decode_agg_tps", "tok/s", "higher", "sum over requests of (tokens - 1) / (last token time - first token time)", decode_agg_tps),
        Metric("prefill_tps", "tok/s", "higher", "total prompt tokens / (latest first-token time - first send)", prefill_tps),
        Metric("ttft_mean_ms", "ms", "lower", "mean of (first token time - send time)", lambda rs: _mean(_ttft_ms(rs))),
        Metric("ttft_p50_ms", "ms", "lower", "median of (first token time - send time)", lambda rs: _pct(_ttft_ms(rs), 50)),
        Metric("ttft_p90_ms", "ms", "lower", "90th percentile of (first token time - send time)", lambda rs: _pct(_ttft_ms(rs), 90)),
        Metric("ttft_p99_ms", "ms", "lower", "99th percentile of (first token time - send time)", lambda rs: _pct(_ttft_ms(rs), 99)),
        Metric("tpot_ms", "ms", "lower", "mean over requests of (last token - first token) / (tokens - 1)", tpot_ms),
        Metric("itl_p50_ms", "ms", "lower", "median gap between consecutive token arrivals", lambda rs: _pct(_itl_ms(rs), 50)),
        Metric("itl_p99_ms", "ms", "lower", "99th percentile gap between consecutive token arrivals", lambda rs: _pct(_itl_ms(rs), 99)),
    ]
}


def compute(records: list[RequestRecord]) -> dict:
    row = {name: round(m.fn(records), 4) for name, m in METRICS.items()}
    row["requests"] = len(records)
    row["valid_requests"] = len(_valid(records))
    row["short_requests"] = sum(1 for r in records if r.error is None and r.completion_tokens != r.expected_tokens)
    row["failed_requests"] = sum(1 for r in records if r.error is not None)
    st = [r.server_timings for r in _valid(records) if r.server_timings]
    if st:  # llama-server's own view, for comparison with the client's
        pred = [t.get("predicted_per_second") for t in st if t.get("predicted_per_second")]
        prompt = [t.get("prompt_per_second") for t in st if t.get("prompt_per_second")]
        row["server_decode_tps_per_req_mean"] = round(sum(pred) / len(pred), 4) if pred else None
        row["server_prefill_tps_per_req_mean"] = round(sum(prompt) / len(prompt), 4) if prompt else None
    return row


def direction(metric: str) -> str:
    return METRICS[metric].better if metric in METRICS else "higher"
