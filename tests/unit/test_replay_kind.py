"""The `trace` workload kind (parity.workloads.trace) on a real run's requests: a Mooncake slice
replayed on llama-server (tests/data/replay/llama-server: stock build of the smoke source, a
synthesized tiny llama of 32k context, --parallel 1), point 1 on a fresh server, point 2 the
same prompts again on it (fresh_blocks false: the planted warm cache).  The prompts are built
again from the trace and the server's own pool of ids; the rows are computed as a run computes
them (parity.serving.workloads.point_row)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from parity.errors import ConfigError, UsageError
from parity.loadgen.record import RequestRecord
from parity.metrics import validity
from parity.replay.blocks import Blocks, digest, pool_of
from parity.serving.workloads import point_row
from parity.workloads import WORKLOADS
from parity.workloads.base import Measured
from parity.workloads.spec import WorkloadConfig, check_workload
from parity.workloads.trace import cache_config, cache_model, point_extra, selection

DATA = Path(__file__).resolve().parents[1] / "data" / "replay"
RUN = DATA / "llama-server"
KIND = WORKLOADS["trace"]


def cfg(**over) -> WorkloadConfig:
    fields = {"kind": "trace", "trace": str(DATA / "mooncake-conversation.jsonl"), "sessions": 8, "seed": 11,
              "max_request_tokens": 16384, "speedups": [20.0, 21.0], "fresh_blocks": False, "max_delay_p99_ms": 50.0}
    return WorkloadConfig(**{**fields, **over})


def records(name: str) -> list[RequestRecord]:
    rows = json.loads((RUN / name).read_text())
    return [validity.check_request(RequestRecord(**{k: v for k, v in d.items() if k != "valid"})) for d in rows]


def row_of(name: str, speed: float, c: WorkloadConfig) -> dict:
    sel = selection(c)
    pool = pool_of(json.loads((RUN / "pool-tiny-llama.json").read_text()))
    prompts = [Blocks(pool, c.seed, 0).prompt(r, i) for i, r in enumerate(sel.requests)]
    recs = records(name)
    m = Measured(speed, f"{speed:g}x", recs, extra=point_extra(sel, prompts, recs, c, speed))
    return {**point_row("trace", c, m, None, 0.0, 0.0), "_prompts": prompts, "_records": recs}


def test_the_prompts_built_again_are_the_ones_the_server_counted():
    c = cfg()
    row = row_of("mooncake-cold.json", 20.0, c)
    assert row["prompt_digest"] == "09590d655aa92bf5"  # the digest the run recorded
    sel = selection(c)
    for r, p, rec in zip(sel.requests, row["_prompts"], row["_records"]):
        t = rec.server_timings
        assert len(p) == r.input_tokens == rec.sent_prompt_tokens == t["prompt_n"] + t["cache_n"] == rec.prompt_tokens
    assert row["input_exact_share"] == 1.0


def test_a_cold_point_checks_out_and_the_planted_warm_one_is_invalid():
    c = cfg()
    cold, warm = row_of("mooncake-cold.json", 20.0, c), row_of("mooncake-warm.json", 21.0, c)
    assert cold["valid"], cold["invalid_reasons"]
    rates = (cold["trace_hit_rate"], cold["expected_hit_rate"], cold["server_hit_rate"])
    assert rates == pytest.approx((0.4689,) * 3, abs=1e-4)
    assert cold["cache_state"].startswith("checked: the server reused 46.89%")
    assert not warm["valid"] and warm["cache_state"] == "warm" and warm["hit_gap"] == pytest.approx(0.4532, abs=1e-4)
    (reason,) = [p for p in warm["invalid_reasons"] if p.startswith("cache state")]
    assert reason.startswith("cache state: the server reused 92.21% of the prompt tokens, the point's own prompts "
                             "allow 46.89%")
    assert reason.endswith("it held prompts from before the point (a warm cache: the cold-cache rule was broken)")
    # the schedule: every request due at its trace time / 20, late by at most max_delay_p99_ms
    assert cold["sched_delay_p99_ms"] < 50 and cold["ttft_sched_p50_ms"] >= cold["ttft_p50_ms"]


def test_a_looser_gap_lets_the_warm_point_pass_and_a_cache_unchecked_is_a_reason():
    warm = row_of("mooncake-warm.json", 21.0, cfg(max_hit_gap=0.5))
    assert not [p for p in warm["invalid_reasons"] if p.startswith("cache state")]
    recs = records("mooncake-cold.json")
    for r in recs:
        r.cached_tokens = None  # an engine that says nothing of its cache, no /metrics either
    c = cfg()
    sel = selection(c)
    m = Measured(20.0, "20x", recs, extra={"expected_hit_tokens": 1, "answered_prompt_tokens": 2})
    row = point_row("trace", c, m, None, 0.0, 0.0)
    unchecked = "cache state unchecked: the server said neither per request"
    assert any(p.startswith(unchecked) for p in row["invalid_reasons"])
    assert len(sel.requests) == 10


def test_the_section_is_checked_before_any_build(tmp_path):
    with pytest.raises(ConfigError, match=r"k.speedups: must be a non-empty list of distinct positive factors"):
        check_workload(cfg(speedups=[2.0, 2.0]), "f", "k")
    with pytest.raises(ConfigError, match=r"k.trace: a request trace file, or mixture: one of azure-code"):
        check_workload(cfg(trace=None), "f", "k")
    with pytest.raises(UsageError, match=r"README.md: not a request trace parity reads"):
        check_workload(cfg(trace=str(DATA / "README.md")), "f", "k")
    with pytest.raises(UsageError, match="sessions 500 but the window holds 120"):
        check_workload(cfg(sessions=500), "f", "k")


def test_the_built_in_draws_a_mixture_sized_to_the_context_and_states_its_cold_rule():
    s = SimpleNamespace(gen=64, ptok=128)
    fields = KIND.sized(False, 2048, 4, s)
    c = WorkloadConfig(kind="trace", **fields)
    check_workload(c, "f", "k")
    wl = SimpleNamespace(name="trace", kind="trace", cfg=c, gen=64, ptok=128)
    sel = selection(c)
    assert c.mixture == "azure-conv" and len(sel.requests) == 12 and KIND.need(wl) <= 2048
    assert all(r.hash_ids is None for r in sel.requests)  # private prompts: a mixture says nothing of shared prefixes
    (key, label), = KIND.points(wl)
    assert key == 1.0 and label.endswith("cold: a fresh server")
    two = SimpleNamespace(**{**vars(wl), "cfg": cfg()})
    rules = [lbl.split(", ", 1)[1] for _, lbl in KIND.points(two)]
    assert rules == ["cold: a fresh server", "WARM: the blocks of point 1 again (fresh_blocks false)"]
    assert digest([[1, 2]]) != digest([[1], [2]])


def test_a_vllm_server_says_its_cache_block_and_whether_its_prefix_cache_is_on():
    # the /metrics of real vLLM-CPU servers (tests/data/vllm), with and without prefix caching
    on = (DATA.parent / "vllm" / "metrics-cache-after-sp.txt").read_text()
    off = (DATA.parent / "vllm" / "metrics-nocache-after-sp.txt").read_text()
    assert cache_config(on)["block_size"] == "128" and cache_config(on)["enable_prefix_caching"] == "True"
    recs = records("mooncake-cold.json")
    for r in recs:
        r.server_timings = None  # an engine without llama-server's per-request timings
    _, ready, block, what = cache_model(recs, 16, on)
    assert block == 128 and "its /metrics block_size" in what and ready == [r.first for r in recs]
    _, ready, block, what = cache_model(recs, 16, off)
    assert ready == [None] * len(recs) and what.startswith("no prefix cache")
    assert cache_model(recs, 16, None)[2] == 16  # says nothing: the section's cache_block
