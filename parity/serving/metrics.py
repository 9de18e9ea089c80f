"""Serving metrics, each declared once: name, unit, direction, the formula in
words, and the function that computes it.  Reports print these definitions
(`definitions()`), so numbers and their meaning never drift apart.

Every metric reads only *valid* requests: no error, a first token, and
usage.completion_tokens == the requested GEN.  A short response is counted in
`short_requests`, never averaged in."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence


@dataclass
class RequestRecord:
    send: float = 0.0  # perf_counter seconds when the request was written
    first: float | None = None  # first chunk carrying generated text
    arrivals: list[float] = field(default_factory=list)  # every text chunk's arrival
    prompt_tokens: int = 0  # usage.prompt_tokens (falls back to the prompt we sent)
    completion_tokens: int = 0  # usage.completion_tokens
    expected_tokens: int = 0  # the GEN we asked for
    sent_prompt_tokens: int = 0  # len(prompt) we sent
    error: str | None = None
    response_id: str | None = None  # the server's "id" of the stream
    server_timings: dict | None = None  # llama-server's own "timings"

    @property
    def valid(self) -> bool:
        return self.error is None and self.first is not None and self.completion_tokens == self.expected_tokens

    @property
    def short(self) -> bool:
        return self.error is None and self.completion_tokens != self.expected_tokens

    @property
    def last(self) -> float | None:
        return self.arrivals[-1] if self.arrivals else None


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
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
    v = [r for r in _valid(rs) if r.completion_tokens > 1 and r.last > r.first]
    return sum((r.completion_tokens - 1) / (r.last - r.first) for r in v) if v else math.nan


def prefill_tps(rs):
    v = _valid(rs)
    if not v:
        return math.nan
    span = max(r.first for r in v) - min(r.send for r in v)
    return sum(r.prompt_tokens for r in v) / span if span > 0 else math.nan


def ttft_ms(rs) -> list[float]:
    return [(r.first - r.send) * 1000 for r in _valid(rs)]


def itl_ms(rs) -> list[float]:
    out: list[float] = []
    for r in _valid(rs):
        a = r.arrivals
        out += [(a[i] - a[i - 1]) * 1000 for i in range(1, len(a))]
    return out


def tpot_ms(rs):
    vals = [(r.last - r.first) * 1000 / (r.completion_tokens - 1) for r in _valid(rs) if r.completion_tokens > 1]
    return _mean(vals)


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
        Metric("wall_s", "s", "lower", "last token arrival - first request send, over the batch", wall_s),
        Metric("agg_tps", "tok/s", "higher", "total generated tokens (usage.completion_tokens) / wall_s", agg_tps),
        Metric("decode_agg_tps", "tok/s", "higher", "sum over requests of (completion_tokens - 1) / (last token time - first token time)", decode_agg_tps),
        Metric("prefill_tps", "tok/s", "higher", "total prompt tokens / (latest first-token time - earliest send)", prefill_tps),
        Metric("ttft_mean_ms", "ms", "lower", "mean of (first token time - send time)", lambda rs: _mean(ttft_ms(rs))),
        Metric("ttft_p50_ms", "ms", "lower", "median of (first token time - send time)", lambda rs: percentile(ttft_ms(rs), 50)),
        Metric("ttft_p90_ms", "ms", "lower", "90th percentile of (first token time - send time)", lambda rs: percentile(ttft_ms(rs), 90)),
        Metric("ttft_p99_ms", "ms", "lower", "99th percentile of (first token time - send time)", lambda rs: percentile(ttft_ms(rs), 99)),
        Metric("tpot_ms", "ms", "lower", "mean over requests of (last token time - first token time) / (completion_tokens - 1)", tpot_ms),
        Metric("itl_p50_ms", "ms", "lower", "median gap between consecutive streamed chunks of a request", lambda rs: percentile(itl_ms(rs), 50)),
        Metric("itl_p99_ms", "ms", "lower", "99th percentile gap between consecutive streamed chunks of a request", lambda rs: percentile(itl_ms(rs), 99)),
    ]
}


def _round(x: float) -> float | None:
    return round(x, 4) if isinstance(x, (int, float)) and math.isfinite(x) else None


def compute(records: list[RequestRecord]) -> dict:
    row = {name: _round(m.fn(records)) for name, m in METRICS.items()}
    row["requests"] = len(records)
    row["valid_requests"] = len(_valid(records))
    row["short_requests"] = sum(1 for r in records if r.short)
    row["failed_requests"] = sum(1 for r in records if r.error is not None)
    row["prompt_tokens_mismatch"] = sum(1 for r in _valid(records) if r.sent_prompt_tokens and r.prompt_tokens != r.sent_prompt_tokens)
    st = [r.server_timings for r in _valid(records) if r.server_timings]
    if st:  # llama-server's own view of each request, next to the client's
        pred = [t["predicted_per_second"] for t in st if t.get("predicted_per_second")]
        prompt = [t["prompt_per_second"] for t in st if t.get("prompt_per_second")]
        tpot = [t["predicted_per_token_ms"] for t in st if t.get("predicted_per_token_ms")]
        row["server_decode_tps_per_req_mean"] = _round(_mean(pred))
        row["server_prefill_tps_per_req_mean"] = _round(_mean(prompt))
        row["server_tpot_ms_mean"] = _round(_mean(tpot))
    return row


def definitions(names: Sequence[str] | None = None) -> list[dict]:
    return [{"name": m.name, "unit": m.unit, "better": m.better, "formula": m.formula} for n, m in METRICS.items() if names is None or n in names]


def render_definitions(names: Sequence[str] | None = None) -> str:
    return "\n".join(f"{d['name']} [{d['unit']}, {d['better']} is better]: {d['formula']}" for d in definitions(names))


def direction(metric: str) -> str:
    """'higher' or 'lower' is better: declared here, else guessed from a time unit suffix."""
    if metric in METRICS:
        return METRICS[metric].better
    return "lower" if metric.endswith(("_ms", "_s")) else "higher"
