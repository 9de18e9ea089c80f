"""Workloads' computations on hand-made request timelines: open-loop schedule checks,
goodput and SLO attainment, held or not; decode stalls during a long prompt's admission;
prefix-cache hits from server deltas (counted or derived); multi-turn prompt sizes; the
workload summary; the workload configs and plan checks."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from parity.config import profile_from_dict
from parity.workloads.spec import SloConfig, WorkloadConfig, check_workload
from parity.errors import ConfigError, UsageError
from parity.metrics import workload as wm
from parity.metrics.registry import definitions, direction
from parity.metrics.serving import RequestRecord
from parity.metrics.validity import check_request
from parity.engines import llama, vllm
from parity.serving.workloads import point_row, server_deltas
from parity.workloads import WORKLOADS
from parity.workloads.base import Measured
from parity.workloads.open_loop import held_verdict, open_loop_problems


def rec(send, first, times=None, gap=0.01, tokens=5, gen=None, prompt=10, scheduled=None, error=None, cached=None):
    if times is None:
        times = [first + i * gap for i in range(tokens)] if first is not None else []
    n = len(times)
    r = RequestRecord(send=send, first=first, token_times=list(times), chunks=len(set(times)), tokens=n, usage_tokens=n, prompt_tokens=prompt, sent_prompt_tokens=prompt,
                      expected_tokens=gen or n, error=error, finish_reason="length", scheduled=scheduled, cached_tokens=cached)  # fmt: skip
    return check_request(r)


def row_of(kind, records, cfg=None, server=None, **kw):
    m = Measured(kw.pop("key", 1), kw.pop("label", "p"), records, **kw)
    return point_row(kind, cfg or WorkloadConfig(kind=kind), m, server, min_window_s=0.0, tolerance=0.0)


# ------------------------------------------------------------------ open loop


def open_records(due, late_ms, ttft=0.05, gap=0.01, tokens=5):
    return [rec(d + x / 1000, d + x / 1000 + ttft, gap=gap, tokens=tokens, scheduled=d) for d, x in zip(due, late_ms)]


def test_open_loop_schedule_achieved_and_served_by_hand():
    due = [0.0, 0.5, 1.0, 1.5, 2.0]
    recs = open_records(due, [0, 1, 0.5, 2, 0])
    s = wm.Sample(recs)
    assert wm.scheduled_rate(s) == pytest.approx(2.0)
    assert wm.achieved_rate(s) == pytest.approx(4 / 2.0)
    # the first token's wait follows the sends' lateness (0-2 ms): Theil-Sen's slope 0.25 ms per second
    assert wm.served_rate(s) == pytest.approx(2.0 / 1.00025)
    row = row_of("open-loop", recs, WorkloadConfig(kind="open-loop", max_delay_p99_ms=10))
    assert row["sched_delay_max_ms"] == pytest.approx(2.0, abs=1e-3) and row["sched_delay_p50_ms"] == pytest.approx(0.5, abs=1e-3)
    assert row["achieved_share"] == pytest.approx(1.0) and row["served_share"] == pytest.approx(1 / 1.00025, abs=1e-4)  # rows keep 4 decimals
    assert row["held"] is True and row["valid"] is True
    assert row["e2e_p50_ms"] == pytest.approx(90.0, abs=1e-3) and row["tpot_p50_ms"] == pytest.approx(10.0, abs=1e-3)
    assert row["goodput_rps"] is None and "no SLO bound set" in row["why"]["goodput_rps"]


def test_a_server_that_falls_behind_is_not_held_and_says_so():
    due = [i * 0.1 for i in range(10)]  # 10 req/s
    recs = [rec(d, 0.05 + i * 0.5, gap=0.01, tokens=3, scheduled=d) for i, d in enumerate(due)]  # served one per 0.5 s
    row = row_of("open-loop", recs, WorkloadConfig(kind="open-loop"))
    assert row["served_rate"] == pytest.approx(2.0)
    assert row["served_share"] == pytest.approx(0.2, rel=1e-3)
    assert row["wait_growth_ms_per_s"] == pytest.approx(4000)  # each request waited 0.4 s longer, 0.1 s later
    assert row["held"] is False and row["held_note"].startswith("not held: the wait for a first token grew 4000 ms per second of the schedule: "
                                                                "the server took 2 req/s of the scheduled 10")
    assert row["valid"] is True  # the load generator kept its schedule: the measurement stands, marked not held


HELD = Path(__file__).parents[1] / "data" / "workloads" / "held"


def captured(name: str) -> list:
    """A point's requests file as the run wrote it (the H200 replay's: gzipped under tests/data/replay/h200-aa)."""
    import gzip

    import msgspec

    path = HELD / name if (HELD / name).exists() else HELD.parents[1] / "replay" / "h200-aa" / name
    data = path.read_bytes()
    return msgspec.json.decode(gzip.decompress(data) if path.suffix == ".gz" else data, type=list[RequestRecord])


def completions_share(recs: list) -> float:
    """The rule before: (finished - 1) / (last finish - first finish) over the scheduled rate."""
    ends = sorted(r.end for r in recs if r.end is not None)
    return (len(ends) - 1) / (ends[-1] - ends[0]) / wm.scheduled_rate(wm.Sample(recs))


@pytest.mark.parametrize("name, old, share", [
    # an H200 replaying 20 s of a trace on 16 slots, no request waiting for one: held (the old rule said not)
    ("stock_b-r0.json.gz", (0.93, 0.94), (0.99, 1.01)),
    ("cpu-open-loop-2rps-tiny.json", (0.99, 1.01), (0.99, 1.01)),
    ("cpu-open-loop-100rps-tiny.json", (0.78, 0.80), (0.80, 0.88)),  # 4 slots at 100 req/s: its queue grew
])
def test_held_reads_the_growth_of_the_first_tokens_wait_on_real_requests(name, old, share):
    recs = captured(name)
    assert old[0] < completions_share(recs) < old[1]
    row = row_of("open-loop", recs, WorkloadConfig(kind="open-loop", max_delay_p99_ms=1000, min_achieved_share=0.95))
    assert share[0] < row["served_share"] < share[1], row["served_share"]
    assert row["held"] is (share[0] >= 0.95), row["held_note"]
    assert row["served_rate"] == pytest.approx(row["scheduled_rate"] * row["served_share"], rel=1e-3)  # rows keep 4 decimals


def test_a_load_generator_that_fell_behind_makes_the_point_invalid():
    due = [i * 0.1 for i in range(10)]
    late = [0, 0, 0, 0, 0, 0, 0, 0, 30, 40]  # ms
    row = row_of("open-loop", open_records(due, late), WorkloadConfig(kind="open-loop", max_delay_p99_ms=10))
    assert row["valid"] is False
    assert any(p.startswith("the load generator fell behind: scheduling delay p99 39.") for p in row["invalid_reasons"])
    # sent too slowly: every send 20 % later than due spreads the sends over 1.08 s instead of 0.9
    slow = [rec(d * 1.2, d * 1.2 + 0.05, scheduled=d) for d in due]
    row = row_of("open-loop", slow, WorkloadConfig(kind="open-loop", max_delay_p99_ms=1e9, min_achieved_share=0.95))
    assert row["achieved_share"] == pytest.approx(1 / 1.2, rel=1e-3)
    assert any("of the scheduled 10 req/s (min_achieved_share 0.95)" in p for p in row["invalid_reasons"])
    assert open_loop_problems({"sched_delay_p99_ms": 1.0, "achieved_share": 0.99, "why": {}}, WorkloadConfig(kind="open-loop")) == []


def test_goodput_and_slo_attainment_count_only_requests_meeting_every_bound():
    # four requests sent at 0, 1, 2, 3 s; ttft 100 / 300 / 100 / 100 ms; tpot 10 / 10 / 50 / 10 ms; the last one invalid (short)
    recs = [
        rec(0.0, 0.1, gap=0.01, tokens=5),
        rec(1.0, 1.3, gap=0.01, tokens=5),
        rec(2.0, 2.1, gap=0.05, tokens=5),
        rec(3.0, 3.1, gap=0.01, tokens=4, gen=5),
    ]
    assert [r.valid for r in recs] == [True, True, True, False]
    s = wm.Sample(recs, slo=SloConfig(ttft_ms=200, tpot_ms=20))
    assert wm.slo_attainment(s) == pytest.approx(1 / 4)
    span = (3.1 + 3 * 0.01) - 0.0  # first send -> last token
    assert wm.goodput_rps(s) == pytest.approx(1 / span)
    assert wm.slo_attainment(wm.Sample(recs, slo=SloConfig(e2e_ms=150))) == pytest.approx(1 / 4)  # e2e 140, 340, 300 ms, (invalid)
    assert wm.slo_attainment(wm.Sample(recs, slo=SloConfig(e2e_ms=350))) == pytest.approx(3 / 4)
    assert wm.slo_attainment(wm.Sample(recs, slo=SloConfig(ttft_ms=1000))) == pytest.approx(3 / 4)


def test_held_verdict_unknown_without_completions():
    assert held_verdict({"served_share": None, "why": {"served_share": "fewer than two distinct request completions: no rate"}}, WorkloadConfig(kind="open-loop"))["held"] is None


# ------------------------------------------------------------------ prefill under decode


def decode_stream(start_ms, step_ms, until_ms, freeze_ms=None):
    """Arrivals (s) every step from start to until; freeze=(t0, t1) ms: nothing arrives strictly inside it."""
    return [t / 1000 for t in range(start_ms, until_ms + 1, step_ms) if not (freeze_ms and freeze_ms[0] < t < freeze_ms[1])]


def test_stall_is_the_decode_gap_overlapping_the_long_prompts_admission():
    # two streams decode every 10 ms from 0.1 s to 2 s; the long prompt is sent at 1.0 and
    # gets its first token at 1.2; one stream freezes from 1.0 to 1.15 (gap 1.0 -> 1.15), the
    # other from 1.0 to 1.2 (gap 1.0 -> 1.2)
    a = rec(0.0, 0.1, times=decode_stream(100, 10, 2000, freeze_ms=(1000, 1150)))
    b = rec(0.0, 0.1, times=decode_stream(100, 10, 2000, freeze_ms=(1000, 1200)))
    long = rec(1.0, 1.2, gap=0.01, tokens=3)
    s = wm.Sample([a, b, long], decode=[a, b], long=[long])
    gaps = wm.stall_gaps(s)
    # stream a: the gap 1.0->1.15 overlaps, then 1.15->1.16 ... 1.19->1.20 (5 gaps), and 1.20->1.21 starts at the window's end (not overlapping)
    # stream b: 1.0->1.2 only
    assert sorted(round(g, 3) for g in gaps) == [10.0] * 5 + [150.0, 200.0]
    assert max(gaps) == pytest.approx(200.0)
    assert wm.percentile(wm.baseline_gaps(s), 50) == pytest.approx(10.0)
    row = row_of("prefill-under-decode", [a, b, long], decode=[a, b], long=[long])
    assert row["stall_max_ms"] == pytest.approx(200.0) and row["stall_ratio"] == pytest.approx(20.0)
    assert row["long_ttft_mean_ms"] == pytest.approx(200.0) and row["long_ttft_max_ms"] == pytest.approx(200.0)
    assert row["stall_p99_ms"] == pytest.approx(wm.percentile([10.0] * 5 + [150.0, 200.0], 99), abs=1e-3)
    assert row["long"] == [{"index": 0, "ttft_ms": 200.0, "streams_running": 2, "stall_max_ms": 200.0, "stall_p99_ms": pytest.approx(197.0, abs=0.01)}]  # 150 + 0.94 x 50
    assert sorted(row["stall_gaps_ms"]) == sorted(round(g, 3) for g in gaps)
    assert row["decode_gap_quantiles_ms"]["p50"] == pytest.approx(10.0)
    assert row["valid"] is True


def test_overlapping_admissions_count_a_shared_gap_once_in_the_distribution():
    a = rec(0.0, 0.1, times=decode_stream(100, 10, 2000, freeze_ms=(1000, 1300)))
    first = rec(1.0, 1.3, gap=0.01, tokens=3)
    second = rec(1.1, 1.3, gap=0.01, tokens=3)  # sent during the first one's admission
    s = wm.Sample([a, first, second], decode=[a], long=[first, second])
    assert [round(g, 3) for g in wm.stall_gaps(s)] == [300.0]
    assert [p["stall_max_ms"] for p in wm.per_long(s)] == [300.0, 300.0]  # each prompt's own figure still sees it


def test_a_merged_chunk_after_a_freeze_is_one_gap_for_the_stall():
    times = [0.1, 0.11, 0.12, 0.5, 0.5, 0.5, 0.51, 0.52]  # three tokens arrive together after a 380 ms freeze
    a = rec(0.0, 0.1, times=times)
    long = rec(0.2, 0.45, gap=0.01, tokens=2)
    s = wm.Sample([a, long], decode=[a], long=[long])
    assert wm.stall_gaps(s) == pytest.approx([380.0])


def test_streams_that_ended_before_the_long_prompt_give_no_stall_and_say_why():
    a = rec(0.0, 0.1, gap=0.01, tokens=10)  # done at 0.19
    long = rec(1.0, 1.3, gap=0.01, tokens=3)
    row = row_of("prefill-under-decode", [a, long], decode=[a], long=[long])
    assert row["stall_max_ms"] is None and "raise decode_gen" in row["why"]["stall_max_ms"]
    assert row["valid"] is False and any(p.startswith("long prompt 0: no decode stream produced a token") for p in row["invalid_reasons"])


def test_a_stream_flushing_many_tokens_per_chunk_is_named_coarse_not_invalid():
    # vLLM's frontend on a busy box: 4 tokens per chunk every 40 ms; a fine stream: 1 per 10 ms
    coarse = rec(0.0, 0.1, times=[t / 1000 for t in range(100, 2001, 40) for _ in range(4)])
    fine = rec(0.0, 0.1, times=decode_stream(100, 10, 2000))
    long = rec(1.0, 1.2, gap=0.01, tokens=3)
    row = row_of("prefill-under-decode", [coarse, long], decode=[coarse], long=[long])
    assert row["decode_tokens_per_chunk"] == pytest.approx(4.0)
    assert row["valid"] is True and "4.0 tokens per chunk" in row["coarse_note"]
    row = row_of("prefill-under-decode", [fine, long], decode=[fine], long=[long])
    assert row["decode_tokens_per_chunk"] == pytest.approx(1.0) and "coarse_note" not in row
    assert wm.decode_tokens_per_chunk(wm.Sample([coarse, fine], decode=[coarse, fine], long=[])) == pytest.approx((len(coarse.token_times) + len(fine.token_times)) / (48 + 191))


def test_streams_the_server_buffered_give_no_stall_and_say_so_not_raise_decode_gen():
    # seen with vLLM on a starved CPU: 960 tokens per stream in five reads within 50 ms, after the
    # engine had finished; the long prompt was sent after the first burst
    burst = [5.521] * 205 + [5.533] * 205 + [5.546] * 205 + [5.558] * 205 + [5.570] * 140
    streams = [rec(0.0, 5.521, times=burst) for _ in range(3)]
    long = rec(5.6, 5.65, gap=0.01, tokens=4)
    row = row_of("prefill-under-decode", [*streams, long], decode=streams, long=[long])
    assert row["decode_tokens_per_chunk"] == pytest.approx(192.0)
    assert row["valid"] is False and "192 tokens per chunk: the server buffered them" in row["why"]["stall_max_ms"]
    assert any(p.startswith("long prompt 0: no decode stream produced a token during its admission (the streams arrived 192 tokens per chunk") for p in row["invalid_reasons"])
    assert not any("raise decode_gen" in p for p in row["invalid_reasons"])


# ------------------------------------------------------------------ prefix cache


def test_prefix_hit_rate_from_counters_and_derived_from_computed_prompt_tokens():
    before = {"llamacpp:prompt_tokens_total": 100.0, "llamacpp:prompt_tokens_cached_total": 10.0, "llamacpp:tokens_predicted_total": 0.0}
    after = {"llamacpp:prompt_tokens_total": 100.0 + 4 * 40, "llamacpp:prompt_tokens_cached_total": 10.0 + 4 * 500, "llamacpp:tokens_predicted_total": 20.0}
    d = server_deltas(llama.FAMILY, before, after)
    assert d["prefix_hits"] == 2000 and d["prefix_queries"] == 2160 and d["prompt_tokens_computed"] == 160
    recs = [rec(0.0, 0.2, tokens=5, prompt=540, cached=500) for _ in range(4)]
    row = row_of("shared-prefix", recs, server=d, prefix_tokens=512)
    assert row["prefix_hit_rate"] == pytest.approx(2000 / 2160, abs=1e-4)
    assert row["prefix_hits_derived"] == 4 * 540 - 160
    assert row["cached_prompt_tokens"] == 2000
    assert row["prefix_share"] == pytest.approx(512 / 540, abs=1e-4)
    # the pin's llama-server: no cached counter, only the computed prompt tokens
    pin = server_deltas(llama.FAMILY, {"llamacpp:prompt_tokens_total": 0.0}, {"llamacpp:prompt_tokens_total": 160.0})
    row = row_of("shared-prefix", recs, server=pin, prefix_tokens=512)
    assert row["prefix_hit_rate"] is None and "no prefix_hits series" in row["why"]["prefix_hit_rate"]
    assert row["prefix_hits_derived"] == 2000
    # vLLM names them directly and has no computed-prompt counter
    v = server_deltas(vllm.FAMILY, {"vllm:prefix_cache_queries_total": 0.0, "vllm:prefix_cache_hits_total": 0.0}, {"vllm:prefix_cache_queries_total": 2160.0, "vllm:prefix_cache_hits_total": 1984.0})
    assert v["prefix_hit_rate"] == pytest.approx(1984 / 2160, abs=1e-4) and v["prompt_tokens_computed"] is None
    row = row_of("shared-prefix", recs, server=None, prefix_tokens=512)
    assert "exposes no /metrics" in row["why"]["prefix_hit_rate"]


def test_multi_turn_point_reports_the_resent_history():
    recs = [rec(0.0, 0.3, tokens=4, prompt=300), rec(0.0, 0.5, tokens=4, prompt=340)]
    row = row_of("multi-turn", recs, key=3, label="turn 3", extra={"turn": 3})
    assert row["n"] == 3 and row["point"] == "turn 3" and row["turn"] == 3
    assert row["prompt_tokens_mean"] == 320 and row["ttft_mean_ms"] == pytest.approx(400.0)


# ------------------------------------------------------------------ declarations, summary, config


def test_workload_metrics_are_declared_once_with_the_others():
    names = {d["name"] for d in definitions()}
    for kind in WORKLOADS.values():
        assert kind.metrics and set(kind.metrics) <= set(wm.WORKLOAD_METRICS) <= names
        assert kind.headline and set(kind.headline) <= names and kind.shown and set(kind.shown) <= names
        assert kind.windows and set(kind.windows) <= {"wall_s", "decode_window_s"}
    assert direction("stall_max_ms") == "lower" and direction("goodput_rps") == "higher" and direction("prefix_hit_rate") == "higher"
    assert all(d["formula"] for d in definitions(list(WORKLOADS["open-loop"].metrics)))


def test_workload_summary_medians_ratios_and_tsv(tmp_path):
    from parity.serving import workload_summary

    def row(engine, rep, ttft, hit):
        return {"engine": engine, "repeat": rep, "n": 8, "point": "2x4 prefix 64 + suffix 8", "ttft_mean_ms": ttft, "prefill_tps": 1000.0 / ttft, "prefix_hit_rate": hit,
                "valid": True, "invalid_reasons": [], "requests": 8, "valid_requests": 8, "invalid_requests": 0}  # fmt: skip

    rows = [row("a", 0, 100.0, 0.8), row("b", 0, 200.0, 0.0), row("a", 1, 120.0, 0.8), row("b", 1, 220.0, 0.0)]
    rows[1]["coarse_note"] = "the decode streams arrived 6.0 tokens per chunk"
    written = {}
    rd = SimpleNamespace(write_json=lambda n, d: written.__setitem__(n, d), write_text=lambda n, t: written.__setitem__(n, t))
    wl = SimpleNamespace(kind="shared-prefix", describe=lambda: {"name": "sp", "kind": "shared-prefix"})
    shape = SimpleNamespace(ptok=8, gen=4, parallel=8, ctx=1024, prompt="tokens", min_window_s=0.0, invalid_tolerance=0.0)
    order, st = [(0, "a"), (0, "b"), (1, "a"), (1, "b")], profile_from_dict({"name": "t"}).stats
    plan = SimpleNamespace(workload=wl, model="m", engines=["a", "b"], reference="b", shape=shape, npl=[8], repeat=2, sized=None, order=order, stats=st)
    doc = workload_summary.write(plan, rd, rows)
    med = {m["engine"]: m for m in doc["medians"]}
    assert med["a"]["ttft_mean_ms"] == 110.0 and med["b"]["ttft_mean_ms"] == 210.0 and med["a"]["point"] == "2x4 prefix 64 + suffix 8"
    (r,) = doc["ratios"]
    assert r["ttft_mean_ms"] == pytest.approx(110 / 210, abs=1e-4) and r["prefix_hit_rate"] is None  # a ratio over a zero reference is none
    assert r["noise"].startswith("noise unknown: 2 valid repeats") and doc["headline"].startswith("a/b 2x4 prefix 64 + suffix 8: ttft_mean_ms 0.5238x")
    assert doc["valid"] is True and written["summary.json"] is doc
    assert doc["coarse_streams"] == ["b r0 2x4 prefix 64 + suffix 8: the decode streams arrived 6.0 tokens per chunk"]
    lines = written["parity_summary.tsv"].splitlines()
    assert lines[0].split("\t")[:8] == ["kind", "engine", "n", "point", "repeat", "reference", "valid", "held"] and len(lines) == 1 + 4 + 2 + 1


def test_a_trace_summary_pairs_energy_per_token_where_it_was_measured_and_not_elsewhere(tmp_path):
    from parity.serving import workload_summary

    def row(engine, rep, ttft, j):
        return {"engine": engine, "repeat": rep, "n": 1.5, "point": "1.5x: 59 requests", "ttft_sched_p50_ms": ttft, "tpot_p50_ms": 25.0,
                "server_hit_rate": 0.0, "j_per_output_tok": j, "j_per_total_tok": None if j is None else j / 7,
                "valid": True, "invalid_reasons": [], "requests": 59, "valid_requests": 59, "invalid_requests": 0}  # fmt: skip

    wl = SimpleNamespace(kind="trace", describe=lambda: {"name": "tr", "kind": "trace"})
    shape = SimpleNamespace(ptok=8, gen=4, parallel=16, ctx=1024, prompt="tokens", min_window_s=0.0, invalid_tolerance=0.0)
    order, st = [(r, e) for r in range(3) for e in ("a", "b")], profile_from_dict({"name": "t"}).stats
    plan = SimpleNamespace(workload=wl, model="m", engines=["a", "b"], reference="b", shape=shape, npl=[1.5], repeat=3, sized=None, order=order, stats=st)
    rd = SimpleNamespace(write_json=lambda n, d: None, write_text=lambda n, t: None)
    # J/token per block as a GPU measured it: a / b = 1.10, 1.12, 1.08
    rows = [row("a", 0, 60.0, 1.10), row("b", 0, 60.0, 1.0), row("a", 1, 61.0, 1.12), row("b", 1, 60.5, 1.0),
            row("a", 2, 59.0, 1.08), row("b", 2, 59.5, 1.0)]
    pairs = {p["metric"]: p for p in workload_summary.write(plan, rd, rows)["paired"]}
    assert {"ttft_sched_p50_ms", "tpot_p50_ms", "j_per_output_tok", "j_per_total_tok"} <= set(pairs)
    j = pairs["j_per_output_tok"]
    assert j["ratio"] == pytest.approx((1.10 * 1.12 * 1.08) ** (1 / 3), abs=1e-4) and j["n_blocks"] == 3 and j["low"] > 1.0
    # a CPU box: no energy number in any row, so no J/token pair (not a "missing" one)
    cpu = [row(e, r, t, None) for e, r, t in (("a", 0, 60.0), ("b", 0, 60.0), ("a", 1, 61.0), ("b", 1, 60.5))]
    plan.order, plan.repeat = order[:4], 2
    pairs = {p["metric"] for p in workload_summary.write(plan, rd, cpu)["paired"]}
    assert "j_per_output_tok" not in pairs and "ttft_sched_p50_ms" in pairs


def test_workload_configs_are_checked():
    check_workload(WorkloadConfig(kind="open-loop", rates=[1.0, 2.5]), "f", "serving.workloads.ol")
    with pytest.raises(ConfigError, match=r"serving.workloads.ol.rates"):
        check_workload(WorkloadConfig(kind="open-loop", rates=[]), "f", "serving.workloads.ol")
    with pytest.raises(ConfigError, match=r"rates.*distinct"):
        check_workload(WorkloadConfig(kind="open-loop", rates=[2.0, 2.0]), "f", "serving.workloads.ol")
    with pytest.raises(ConfigError, match=r"slo.ttft_ms"):
        check_workload(WorkloadConfig(kind="open-loop", slo=SloConfig(ttft_ms=0)), "f", "k")
    with pytest.raises(ConfigError, match=r"k.group_size: must be positive"):
        check_workload(WorkloadConfig(kind="shared-prefix", group_size=0), "f", "k")
    with pytest.raises(ConfigError, match=r"serving.workloads.x.kind"):
        profile_from_dict({"name": "t", "serving": {"workloads": {"x": {"kind": "zigzag"}}}})
    with pytest.raises(ConfigError, match=r"serving.workloads.x.turns: must be positive"):
        profile_from_dict({"name": "t", "serving": {"workloads": {"x": {"kind": "multi-turn", "turns": 0}}}})


def test_resolve_and_attach_refuse_what_cannot_run():
    from parity.engines.bound import bind_all
    from parity.serving.workloads import Workload, attach, resolve

    prof = profile_from_dict({"name": "t", "engines": {"e": {"kind": "llama", "bin_dir": "/x"}},
                              "serving": {"workloads": {"sp": {"kind": "shared-prefix", "groups": 2, "group_size": 4, "prefix_tokens": 64, "suffix_tokens": 8}}}})  # fmt: skip
    s = prof.serving
    with pytest.raises(UsageError, match=r"--workload nope: no such workload in profile t \(serving.workloads: sp; built in: shared-prefix, prefill-under-decode, open-loop, multi-turn, prefill-curve, trace\)"):
        resolve(prof, "nope", s)
    wl = resolve(prof, "sp", s)
    assert isinstance(wl, Workload) and wl.gen == s.gen and wl.points() == [(8, "2x4 prefix 64 + suffix 8")]
    inline = resolve(prof, {"name": "ol", "kind": "open-loop", "rates": [1, 2]}, s)
    assert inline.name == "ol" and [k for k, _ in inline.points()] == [1, 2]
    with pytest.raises(ConfigError, match=r"with.workload.rates"):
        resolve(prof, {"kind": "open-loop", "rates": [0]}, s)
    plan = SimpleNamespace(engines=["e"], bound=bind_all(prof, ["e"]), shape=SimpleNamespace(parallel=4), limits={"e": 1024}, limit_what={"e": "-c 4096 / --parallel 4"}, npl=[1])
    with pytest.raises(UsageError, match="8 requests in flight exceed --parallel 4"):
        attach(plan, wl)
    plan.shape.parallel, plan.limits["e"] = 8, 100
    with pytest.raises(UsageError, match=r"a request needs 136 tokens .* engine e gives 100: -c 4096"):
        attach(plan, wl)
    plan.limits["e"] = 1024
    attach(plan, wl)
    assert plan.workload is wl and plan.npl == [8]


def test_cached_prompt_tokens_are_read_from_a_real_llama_server_stream():
    # tests/data/serving/llama-server-stream.raw: a real stream whose final chunk says
    # usage.prompt_tokens_details.cached_tokens 8 (and timings.cache_n 8)
    from pathlib import Path

    from parity.loadgen.http import BodyDecoder, SSEParser, parse_head
    from parity.loadgen.client import _Handler

    raw = (Path(__file__).resolve().parent.parent / "data" / "serving" / "llama-server-stream.raw").read_bytes()
    i = raw.find(b"\r\n\r\n")
    _, headers = parse_head(raw[:i])
    events = SSEParser().feed(BodyDecoder(headers).feed(raw[i + 4 :]))
    rec = RequestRecord()
    h = _Handler(rec, None, "chunks")  # the capture was made without timings_per_token
    for k, ev in enumerate(events):
        h(float(k), ev)
    assert rec.cached_tokens == 8 and rec.usage_tokens == rec.tokens > 0
    rec = RequestRecord()
    h = _Handler(rec, None, "chunks")
    for k, ev in enumerate(events):  # a build whose usage has no details still says cache_n in its timings
        h(float(k), ev.replace(b'"prompt_tokens_details":{"cached_tokens":8}', b'"x":0'))
    assert rec.cached_tokens == 8


VLLM_DATA = Path(__file__).resolve().parents[1] / "data" / "vllm"


@pytest.mark.parametrize("caching", ["on", "off"])
def test_vllm_prefix_counters_with_caching_on_and_off(caching):
    """Real vLLM 0.32 /metrics after the shared-prefix workload (2 x 3 requests, 256 shared +
    16 own tokens, primers and warmup before them), once as it starts by default and once with
    --no-enable-prefix-caching (tests/data/vllm/metrics-*-after-sp.txt).  Off, vLLM never
    looks: both counters stay 0 while it took 2240 prompt tokens, and the hit rate is a reason,
    not 0 %.  test_workloads_real serves the "on" case live."""
    from parity.metrics.prometheus import parse

    after = parse((VLLM_DATA / f"metrics-{'cache' if caching == 'on' else 'nocache'}-after-sp.txt").read_text())
    assert after["vllm:prompt_tokens_total"] == 2240.0
    before = {k: 0.0 for k in after if k.startswith("vllm:")}  # a fresh server's counters
    d = server_deltas(vllm.FAMILY, before, after)
    recs = [rec(0.0, 0.2, tokens=8, prompt=272) for _ in range(6)]
    row = row_of("shared-prefix", recs, server=d, prefix_tokens=256)
    if caching == "on":
        assert (d["prefix_queries"], d["prefix_hits"]) == (2240.0, 1536.0)
        assert row["prefix_hit_rate"] == pytest.approx(1536 / 2240, abs=1e-4)
    else:
        assert (d["prefix_queries"], d["prefix_hits"]) == (0.0, 0.0) and d["prefix_hit_rate"] is None
        assert row["prefix_hit_rate"] is None and "no prefix-cache queries" in row["why"]["prefix_hit_rate"]
