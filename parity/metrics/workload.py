"""The workloads' own metrics, declared like the serving metrics (parity.metrics.serving:
name, unit, direction, the formula in words, the function), and included by its
definitions().  A workload metric reads a Sample: the point's requests (by role where a
workload has roles), the open-loop schedule, the SLO bounds and the server's own
/metrics deltas.  A metric that cannot be computed raises NoValue with the reason.

Gaps for stalls are between successive chunk ARRIVALS of one stream (a chunk that
carries k tokens after a freeze is one gap: the freeze the reader saw), unlike
itl_ms, which spreads a merged chunk's gap over its tokens."""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import msgspec

from parity.loadgen.record import RequestRecord
from parity.metrics.serving import Metric, NoValue
from parity.stats import percentile
from parity.stats.quantiles import harrell_davis

class Sample(msgspec.Struct):  # not a dataclass: that class costs every start ~0.4 ms to create
    """What one workload point measured."""

    records: list[RequestRecord]  # every measured request (valid or not)
    decode: list[RequestRecord] = msgspec.field(default_factory=list)  # prefill-under-decode: the running streams
    long: list[RequestRecord] = msgspec.field(default_factory=list)  # prefill-under-decode: the long prompts
    slo: object | None = None  # SloConfig (ttft_ms, tpot_ms, e2e_ms; None = not bounded)
    server: dict | None = None  # server_metrics.deltas over the measured requests (None: no /metrics)
    prefix_tokens: int = 0  # shared-prefix: tokens of each request's prompt that its group shares
    extra: dict = msgspec.field(default_factory=dict)  # what the kind computed beside the records (trace: hits)

    @property
    def valid(self) -> list[RequestRecord]:
        return [r for r in self.records if r.valid and r.first is not None and r.end is not None]


def _need(rs: Sequence[RequestRecord], what: str = "request") -> list[RequestRecord]:
    rs = [r for r in rs if r.valid and r.first is not None and r.end is not None]
    if not rs:
        raise NoValue(f"no valid {what} produced a token")
    return rs


def _pct(values: Sequence[float], q: float, what: str, estimator=percentile) -> float:
    """estimator(values, q): percentile (q in 0..100) by default, or harrell_davis (q in 0..1)."""
    if not values:
        raise NoValue(f"no {what}")
    return estimator(values, q)


# ------------------------------------------------------------------ open loop: schedule and goodput


def _rate(times: list[float], what: str) -> float:
    times = sorted(times)
    if len(times) < 2 or times[-1] <= times[0]:
        raise NoValue(f"fewer than two distinct {what}: no rate")
    return (len(times) - 1) / (times[-1] - times[0])


def scheduled_rate(s: Sample) -> float:
    return _rate([r.scheduled for r in s.records if r.scheduled is not None], "due times (not an open-loop point)")


def achieved_rate(s: Sample) -> float:
    return _rate([r.send for r in s.records if r.scheduled is not None], "sends")


def delays_ms(s: Sample) -> list[float]:
    return [(r.send - r.scheduled) * 1000 for r in s.records if r.scheduled is not None]


THEIL_SEN_MAX = 2000  # requests the slope reads (evenly spaced past it): its pairs grow as n squared


def wait_growth(s: Sample) -> float:
    """How fast the wait for the first token grew over the schedule: the Theil-Sen slope of
    (first token - due time) against the due time, seconds per second.  A queue that grows
    makes each request wait longer than the one before (arrivals at rate r served at rate m:
    r/m - 1); a server that keeps up gives 0 whatever the requests' sizes.  Completions are not
    used: a trace's outputs lengthen or shorten over a slice, which moves them on a server that
    keeps up (the H200 replays of docs/evidence/device-h200-1129/)."""
    rs = [r for r in s.records if r.scheduled is not None and r.first is not None and r.error is None]
    if len({r.scheduled for r in rs}) < 3:
        raise NoValue("fewer than three answered requests with distinct due times: no growth of their wait")
    rs = sorted(rs, key=lambda r: r.scheduled)
    if len(rs) > THEIL_SEN_MAX:
        rs = [rs[round(i * (len(rs) - 1) / (THEIL_SEN_MAX - 1))] for i in range(THEIL_SEN_MAX)]
    return _theil_sen(tuple((r.scheduled, r.first - r.scheduled) for r in rs))


@lru_cache(maxsize=4)  # a point's row reads it three times (served_rate, served_share, wait_growth_ms_per_s)
def _theil_sen(points: tuple) -> float:
    from scipy.stats import theilslopes

    return float(theilslopes([y for _, y in points], [x for x, _ in points])[0])


def served_share(s: Sample) -> float:
    growth = wait_growth(s)
    if growth <= -1:
        raise NoValue(f"the wait for the first token fell {-growth:g} s per second of schedule: no rate")
    return 1 / (1 + growth)


def served_rate(s: Sample) -> float:
    return scheduled_rate(s) * served_share(s)


def slo_met(r: RequestRecord, slo) -> bool:
    """A valid request that meets every bound the profile sets."""
    if not (r.valid and r.first is not None and r.end is not None):
        return False
    if slo.ttft_ms is not None and (r.first - r.send) * 1000 > slo.ttft_ms:
        return False
    if slo.tpot_ms is not None and ((t := r.tpot_ms) is None or t > slo.tpot_ms):
        return False
    return slo.e2e_ms is None or (r.end - r.send) * 1000 <= slo.e2e_ms


def _slo(s: Sample):
    if s.slo is None or all(getattr(s.slo, k) is None for k in ("ttft_ms", "tpot_ms", "e2e_ms")):
        raise NoValue("no SLO bound set (serving.workloads.NAME.slo: ttft_ms, tpot_ms, e2e_ms)")
    if not s.records:
        raise NoValue("no requests")
    return s.slo


def goodput_rps(s: Sample) -> float:
    slo = _slo(s)
    done = [r for r in s.records if r.end is not None]
    if not done:
        raise NoValue("no request finished")
    span = max(r.end for r in done) - min(r.send for r in s.records)
    if span <= 0:
        raise NoValue("no interval from the first send to the last token")
    return sum(slo_met(r, slo) for r in s.records) / span


def slo_attainment(s: Sample) -> float:
    slo = _slo(s)
    return sum(slo_met(r, slo) for r in s.records) / len(s.records)


def e2e_ms(s: Sample) -> list[float]:
    return [(r.end - r.send) * 1000 for r in _need(s.records)]


def tpots_ms(s: Sample) -> list[float]:
    return [t for r in _need(s.records) if (t := r.tpot_ms) is not None]


# ------------------------------------------------------------------ prefill under decode: stalls


def arrival_gaps(r: RequestRecord) -> list[tuple[float, float]]:
    """(previous arrival, this arrival) for each chunk arrival after the first of a stream."""
    t = sorted(set(r.token_times))
    return list(zip(t, t[1:]))


def admission_gaps(decode: Sequence[RequestRecord], start: float, end: float) -> list[float]:
    """Gaps (ms) of the decode streams that overlap [start, end]: a long prompt's admission
    (its send to its first token)."""
    return [(b - a) * 1000 for r in decode for a, b in arrival_gaps(r) if b > start and a < end]


def per_long(s: Sample) -> list[dict]:
    """Each long prompt's admission: its TTFT and the gaps of the streams running through it."""
    decode = _need(s.decode, "decode stream")
    out = []
    for i, r in enumerate(s.long):
        if r.first is None:
            out.append({"index": i, "ttft_ms": None, "gaps": [], "why": r.error or "no first token"})
            continue
        gaps = admission_gaps(decode, r.send, r.first)
        running = sum(1 for d in decode if d.first is not None and d.first < r.send and d.end is not None and d.end > r.send)
        item = {"index": i, "ttft_ms": round((r.first - r.send) * 1000, 3), "streams_running": running, "gaps": [round(g, 3) for g in gaps]}
        if gaps:
            item.update(stall_max_ms=round(max(gaps), 3), stall_p99_ms=round(percentile(gaps, 99), 3))
        else:
            item["why"] = "no decode stream produced a token during its admission " + _why_no_gap(s)
        out.append(item)
    return out


def stall_gaps(s: Sample) -> list[float]:
    """Every decode gap that overlaps at least one admission, once (admissions may overlap)."""
    windows = [(r.send, r.first) for r in s.long if r.first is not None]
    gaps = [(b - a) * 1000 for r in _need(s.decode, "decode stream") for a, b in arrival_gaps(r) if any(b > lo and a < hi for lo, hi in windows)]
    if not gaps:
        raise NoValue("no decode-stream gap overlaps any long prompt's admission " + _why_no_gap(s))
    return gaps


def _why_no_gap(s: Sample) -> str:
    """Why the streams had no arrival inside an admission: they had ended, or the server held
    their tokens back and sent them in a few bursts (vLLM's frontend on a starved CPU)."""
    try:
        per_chunk = decode_tokens_per_chunk(s)
    except NoValue:
        per_chunk = 1.0
    if per_chunk > COARSE_TOKENS_PER_CHUNK:
        return (f"(the streams arrived {per_chunk:.0f} tokens per chunk: the server buffered them and sent them in bursts, "
                "so their arrivals do not show its decode steps; a longer decode_gen does not help, a less loaded server does)")  # fmt: skip
    return "(the streams had finished: raise decode_gen)"


def baseline_gaps(s: Sample) -> list[float]:
    """Decode-stream gaps that overlap no long prompt's admission (the undisturbed step)."""
    windows = [(r.send, r.first if r.first is not None else r.send) for r in s.long]
    gaps = [(b - a) * 1000 for r in _need(s.decode, "decode stream") for a, b in arrival_gaps(r) if not any(b > lo and a < hi for lo, hi in windows)]
    if not gaps:
        raise NoValue("every decode gap overlaps a long prompt's admission: no undisturbed decode to compare with")
    return gaps


# above this many tokens per chunk a decode stream's gaps time its frontend's flushes, not steps
COARSE_TOKENS_PER_CHUNK = 1.5


def decode_tokens_per_chunk(s: Sample) -> float:
    """Tokens per distinct chunk arrival over the decode streams (1.0: one token per step)."""
    decode = _need(s.decode, "decode stream")
    arrivals = sum(len(set(r.token_times)) for r in decode)
    if not arrivals:
        raise NoValue("no decode stream received a chunk")
    return sum(len(r.token_times) for r in decode) / arrivals


def long_ttfts(s: Sample) -> list[float]:
    return [(r.first - r.send) * 1000 for r in _need(s.long, "long prompt")]


def stall_ratio(s: Sample) -> float:
    base = percentile(baseline_gaps(s), 50)
    if base <= 0:
        raise NoValue("the undisturbed decode gap is 0 ms")
    return max(stall_gaps(s)) / base


# ------------------------------------------------------------------ prefix cache (shared-prefix, multi-turn)


def _server(s: Sample, key: str):
    if s.server is None:
        raise NoValue("the engine exposes no /metrics (or it could not be scraped)")
    v = s.server.get(key)
    if v is None:
        raise NoValue(f"the engine's /metrics has no {key} series (see prefix_hits_derived)")
    return v


def prefix_hit_rate(s: Sample) -> float:
    q, h = _server(s, "prefix_queries"), _server(s, "prefix_hits")
    if not q:
        raise NoValue("the server counted no prefix-cache queries")
    return h / q


def prefix_hits_derived(s: Sample) -> float:
    """Prompt tokens sent minus the prompt tokens the server says it computed."""
    if s.server is None or s.server.get("prompt_tokens_computed") is None:
        raise NoValue("the engine's /metrics has no count of computed prompt tokens")
    sent = sum(r.sent_prompt_tokens for r in s.records if r.error is None)
    return sent - s.server["prompt_tokens_computed"]


def cached_prompt_tokens(s: Sample) -> float:
    vals = [r.cached_tokens for r in s.records if r.cached_tokens is not None]
    if not vals:
        raise NoValue("no response said how many prompt tokens came from cache (usage.prompt_tokens_details / timings.cache_n)")
    return sum(vals)


def prefix_share(s: Sample) -> float:
    total = sum(r.sent_prompt_tokens for r in s.records)
    if not s.prefix_tokens or not total:
        raise NoValue("no shared prefix in this point")
    return s.prefix_tokens * len(s.records) / total


def prompt_tokens_mean(s: Sample) -> float:
    if not s.records:
        raise NoValue("no requests")
    return sum(r.sent_prompt_tokens for r in s.records) / len(s.records)


# ------------------------------------------------------------------ trace replay: schedule and cache state


def sched_latency_ms(s: Sample, until: str) -> list[float]:
    """(first token | last token) - due time: latency counted from when the request was due, so a
    late send (the load generator's dispatch delay) is in it (no coordinated omission)."""
    rs = [r for r in _need(s.records) if r.scheduled is not None]
    if not rs:
        raise NoValue("no due times (not an open-loop point)")
    return [((r.first if until == "first" else r.end) - r.scheduled) * 1000 for r in rs]


def server_prompt_tokens(r: RequestRecord) -> int | None:
    """The prompt tokens the server says it had: computed + reused (llama-server timings.prompt_n +
    cache_n), else its usage.prompt_tokens."""
    t = r.server_timings or {}
    if isinstance(t.get("prompt_n"), int) and isinstance(t.get("cache_n"), int):
        return t["prompt_n"] + t["cache_n"]
    return r.prompt_tokens


def _answered(s: Sample) -> list[RequestRecord]:
    rs = [r for r in s.records if r.error is None]
    if not rs:
        raise NoValue("no request was answered")
    return rs


def server_hit_rate(s: Sample) -> float:
    """The server's own: its per-request cached tokens over the prompt tokens it had, else its
    /metrics prefix-cache hits over queries."""
    rs = _answered(s)
    if all(r.cached_tokens is not None and server_prompt_tokens(r) for r in rs):
        return sum(r.cached_tokens for r in rs) / sum(server_prompt_tokens(r) for r in rs)
    if s.server is not None and s.server.get("prefix_queries"):
        return _server(s, "prefix_hits") / s.server["prefix_queries"]
    raise NoValue("the server said neither per request (usage.prompt_tokens_details.cached_tokens, timings.cache_n) "
                  "nor in /metrics (prefix-cache hits and queries) how much of the prompts it reused")


def _extra_rate(s: Sample, hits: str, total: str, why: str) -> float:
    h, n = s.extra.get(hits), s.extra.get(total)
    if h is None or not n:
        raise NoValue(why)
    return h / n


def expected_hit_rate(s: Sample) -> float:
    return _extra_rate(s, "expected_hit_tokens", "answered_prompt_tokens", "no expected hits computed for this point")


def input_exact_share(s: Sample) -> float:
    rs = _answered(s)
    said = [(server_prompt_tokens(r), r.sent_prompt_tokens) for r in rs]
    if any(n is None for n, _ in said):
        raise NoValue("a response did not say how many prompt tokens the server had")
    return sum(n == sent for n, sent in said) / len(said)


# ------------------------------------------------------------------ prefill curve: the engine's own prompt clock


def engine_timings(s: Sample, key: str) -> list[float]:
    """timings.<key> of every valid request (llama-server's own per-request clock); a request
    without it leaves the point without a value (no mean over the ones that happened to say)."""
    rs = _need(s.records)
    vals = [(r.server_timings or {}).get(key) for r in rs]
    got = [float(v) for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if not got:
        raise NoValue(f"the responses carry no timings.{key} (llama-server's own per-request clock; "
                      "vLLM gives none per request)")
    if len(got) < len(rs):
        raise NoValue(f"{len(rs) - len(got)} of {len(rs)} valid responses carry no timings.{key}")
    return got


def _mean(vals: list[float]) -> float:
    return sum(vals) / len(vals)


def engine_prompt_tps(s: Sample) -> float:
    ms = sum(engine_timings(s, "prompt_ms"))
    if ms <= 0:
        raise NoValue("the server's prompt time sums to 0 ms")
    return sum(engine_timings(s, "prompt_n")) / ms * 1000


WORKLOAD_METRICS: dict[str, Metric] = {
    m.name: m
    for m in [
        # open loop
        Metric("scheduled_rate", "req/s", "higher", "(requests - 1) / (last due time - first due time): the rate the drawn arrival schedule asks for (a Poisson draw of n requests misses the requested rate by about 1/sqrt(n))", scheduled_rate),
        Metric("achieved_rate", "req/s", "higher", "(requests - 1) / (last send - first send): the rate the load generator really sent at", achieved_rate),
        Metric("achieved_share", "share", "higher", "achieved_rate / scheduled_rate (the load generator's self-check; below min_achieved_share the point is invalid)", lambda s: achieved_rate(s) / scheduled_rate(s)),
        Metric("sched_delay_p50_ms", "ms", "lower", "median of (send - due time): how late the load generator sent", lambda s: _pct(delays_ms(s), 50, "due times")),
        Metric("sched_delay_p99_ms", "ms", "lower", "99th percentile of (send - due time) (over max_delay_p99_ms the point is invalid: the load generator fell behind)", lambda s: _pct(delays_ms(s), 99, "due times")),
        Metric("sched_delay_max_ms", "ms", "lower", "largest (send - due time)", lambda s: _pct(delays_ms(s), 100, "due times")),
        Metric("served_rate", "req/s", "higher", "scheduled_rate x served_share: the rate the server took requests at",
               served_rate),
        Metric("served_share", "share", "higher", "1 / (1 + wait_growth_ms_per_s / 1000): below min_achieved_share the "
               "server did not hold the rate (its queue grew)", served_share),
        Metric("wait_growth_ms_per_s", "ms/s", "lower", "the Theil-Sen slope of (first token - due time) over the due "
               "time: how much longer each second's requests waited for their first token", lambda s: wait_growth(s) * 1000),
        Metric("goodput_rps", "req/s", "higher", "requests meeting every SLO bound set (TTFT, TPOT, E2E; invalid requests never do) / (last token arrival - first send)", goodput_rps),
        Metric("slo_attainment", "share", "higher", "requests meeting every SLO bound set / requests sent", slo_attainment),
        Metric("e2e_p50_ms", "ms", "lower", "median of (last token arrival - send)", lambda s: _pct(e2e_ms(s), 50, "finished requests")),
        Metric("e2e_p99_ms", "ms", "lower", "99th percentile of (last token arrival - send)", lambda s: _pct(e2e_ms(s), 99, "finished requests")),
        Metric("tpot_p50_ms", "ms", "lower", "median over requests of (its last token - its first token) / (tokens - 1)", lambda s: _pct(tpots_ms(s), 50, "request with two tokens")),
        Metric("tpot_p99_ms", "ms", "lower", "99th percentile over requests of (its last token - its first token) / (tokens - 1)", lambda s: _pct(tpots_ms(s), 99, "request with two tokens")),
        # prefill under decode
        Metric("stall_max_ms", "ms", "lower", "longest gap between successive chunk arrivals of a running decode stream, over the gaps that overlap a long prompt's admission (its send -> its first token)", lambda s: max(stall_gaps(s))),
        Metric("stall_p99_ms", "ms", "lower", "99th percentile of those admission-overlapping decode gaps", lambda s: percentile(stall_gaps(s), 99)),
        Metric("decode_gap_p50_ms", "ms", "lower", "median gap between successive chunk arrivals of the decode streams outside every admission (the undisturbed decode step)", lambda s: percentile(baseline_gaps(s), 50)),
        Metric("stall_ratio", "x", "lower", "stall_max_ms / decode_gap_p50_ms: how many undisturbed steps the worst freeze lasted", stall_ratio),
        Metric("decode_tokens_per_chunk", "tok", "lower", "decode streams' tokens / their distinct chunk arrivals: 1.0 when the server streams each decode step; above 1.5 the gaps time the frontend's flushes, so stall figures compare only with engines of the same granularity", decode_tokens_per_chunk),
        Metric("long_ttft_mean_ms", "ms", "lower", "mean TTFT (first token arrival - send) of the long prompts", lambda s: sum(long_ttfts(s)) / len(long_ttfts(s))),
        Metric("long_ttft_max_ms", "ms", "lower", "longest TTFT of the long prompts", lambda s: max(long_ttfts(s))),
        # prefix cache
        Metric("prefix_hit_rate", "share", "higher", "the server's own prefix-cache hits / queries over the measured requests (/metrics deltas: vLLM prefix_cache_hits/queries_total; llama-server prompt_tokens_cached / (prompt_tokens + prompt_tokens_cached))", prefix_hit_rate),
        Metric("prefix_hits", "tok", "higher", "the server's prefix-cache hit tokens over the measured requests (/metrics delta)", lambda s: _server(s, "prefix_hits")),
        Metric("prefix_queries", "tok", "higher", "the server's prefix-cache query tokens over the measured requests (/metrics delta)", lambda s: _server(s, "prefix_queries")),
        Metric("prefix_hits_derived", "tok", "higher", "prompt tokens sent - prompt tokens the server computed (/metrics delta of llamacpp:prompt_tokens_total, which excludes reused tokens): reuse on a build without a cached-tokens counter", prefix_hits_derived),
        Metric("cached_prompt_tokens", "tok", "higher", "sum over requests of the prompt tokens each response says came from cache (usage.prompt_tokens_details.cached_tokens, else llama-server timings.cache_n)", cached_prompt_tokens),
        Metric("prefix_share", "share", "higher", "shared prefix tokens / prompt tokens of the measured requests: the hit rate a perfect prefix cache would reach", prefix_share),
        Metric("prompt_tokens_mean", "tok", "higher", "mean prompt tokens sent per request (multi-turn: the resent history + the new user chunk)", prompt_tokens_mean),
        # trace replay
        Metric("ttft_sched_p50_ms", "ms", "lower",
               "median of (first token arrival - due time): TTFT with the load generator's dispatch delay in it "
               "(no coordinated omission)", lambda s: _pct(sched_latency_ms(s, "first"), 50, "due times")),
        Metric("ttft_sched_hd50_ms", "ms", "lower",
               "the same median by the Harrell-Davis estimator (a Beta-weighted mean of every request's value): "
               "steadier than the sample median when the TTFTs step near the middle, where one request changing "
               "side moves the sample median by the step (parity.stats.quantiles)", lambda s: _pct(sched_latency_ms(s, "first"), 0.5, "due times", harrell_davis)),
        Metric("ttft_sched_p99_ms", "ms", "lower", "99th percentile of (first token arrival - due time)",
               lambda s: _pct(sched_latency_ms(s, "first"), 99, "due times")),
        Metric("e2e_sched_p50_ms", "ms", "lower", "median of (last token arrival - due time)",
               lambda s: _pct(sched_latency_ms(s, "last"), 50, "due times")),
        Metric("e2e_sched_p99_ms", "ms", "lower", "99th percentile of (last token arrival - due time)",
               lambda s: _pct(sched_latency_ms(s, "last"), 99, "due times")),
        Metric("trace_hit_rate", "share", "higher",
               "the trace's own prefix reuse over the replayed requests: tokens of each request's leading hash ids an "
               "earlier one had / input tokens (an infinite cache, the trace's block granularity)",
               lambda s: _extra_rate(s, "trace_hit_tokens", "trace_input_tokens",
                                     "the trace has no hash ids: it says nothing of shared prefixes")),
        Metric("expected_hit_rate", "share", "higher",
               "the prefix-cache hits the sent token ids allow a cold cache of the engine's kind / prompt tokens, over "
               "the answered requests: each one's longest common prefix with a prompt cached when it was looked up, "
               "at least one token computed, in the engine's cache blocks (parity.replay.cache)",
               expected_hit_rate),
        Metric("server_hit_rate", "share", "higher",
               "the server's own prefix-cache hits / prompt tokens over the answered requests: per request "
               "(usage.prompt_tokens_details.cached_tokens, llama-server timings.cache_n over prompt_n + cache_n), "
               "else its /metrics prefix-cache hits / queries", server_hit_rate),
        Metric("hit_gap", "share", "lower",
               "server_hit_rate - expected_hit_rate: above 0 the server reused prompts from before the point (a warm "
               "cache), below 0 it lost some a cache of its kind keeps",
               lambda s: server_hit_rate(s) - expected_hit_rate(s)),
        Metric("input_exact_share", "share", "higher",
               "answered requests whose prompt tokens, as the server counted them (timings.prompt_n + cache_n, else "
               "usage.prompt_tokens), equal the token ids sent (the trace's input length)", input_exact_share),
        # prefill curve: the engine's own prompt clock
        Metric("engine_prompt_ms_mean", "ms", "lower",
               "mean over valid requests of the server's own prompt time (llama-server timings.prompt_ms: its "
               "prompt compute up to the first sampled token)", lambda s: _mean(engine_timings(s, "prompt_ms"))),
        Metric("engine_prompt_ms_p50", "ms", "lower",
               "median over valid requests of the server's own prompt time (llama-server timings.prompt_ms)",
               lambda s: percentile(engine_timings(s, "prompt_ms"), 50)),
        Metric("engine_prompt_n_mean", "tok", "higher",
               "mean over valid requests of the prompt tokens the server computed (llama-server timings.prompt_n; "
               "the rest of the prompt came from its cache)", lambda s: _mean(engine_timings(s, "prompt_n"))),
        Metric("engine_prompt_tps", "tok/s", "higher",
               "the engine's own prompt rate: sum of timings.prompt_n / sum of timings.prompt_ms x 1000 over valid "
               "requests",
               engine_prompt_tps),
    ]
}


def compute(names: Sequence[str], sample: Sample) -> tuple[dict, dict]:
    """(row, why) of these workload metrics (a kind's, parity.workloads), as parity.metrics.serving.compute."""
    import math

    row, why = {}, {}
    for name in names:
        try:
            v = WORKLOAD_METRICS[name].fn(sample)
            row[name] = v if isinstance(v, int) else (round(v, 4) if isinstance(v, float) and math.isfinite(v) else None)
            if row[name] is None:
                why[name] = "no value"
        except NoValue as e:
            row[name], why[name] = None, str(e)
        except ZeroDivisionError:
            row[name], why[name] = None, "a rate of zero to divide by"
    return row, why
