"""The TTFT anatomy (parity.ttft) on real captured bytes: llama-server's timestamped trace log and
the requests parity recorded against it (tests/data/llama_server/ttft, README there), and vLLM's
/metrics around a batch (tests/data/vllm)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import msgspec
import pytest

from parity.engines import vllm
from parity.loadgen.record import RequestRecord
from parity.metrics.prometheus import parse as parse_metrics
from parity.ttft import llama_log, split, summary
from parity.ttft.parts import PARTS
from tests.unit.test_fake_vllm_vs_real import body_of_raw

DATA = Path(__file__).resolve().parents[1] / "data" / "llama_server" / "ttft"


def records(name: str) -> list[RequestRecord]:
    rows = json.loads((DATA / name).read_text())
    recs = [msgspec.convert({k: v for k, v in r.items() if k != "valid"}, RequestRecord) for r in rows]
    assert all(r.valid for r in recs)
    return recs


@pytest.fixture(scope="module")
def tasks():
    return llama_log.parse((DATA / "smoke-stock.log").read_text())


@pytest.mark.parametrize("name, n", [("smoke-stock-n1.json", 8), ("smoke-stock-n4.json", 8)])
def test_every_recorded_request_finds_its_one_task_in_the_log(tasks, name, n):
    recs = records(name)
    found = [llama_log.match(tasks, r.server_timings) for r in recs]
    assert len(recs) == n and all(found) and len({t.task for t in found}) == n
    for t, r in zip(found, recs):
        # the server's own lines in order: the slot search, its launch, the launch's cache lines, the prompt
        assert t.select <= t.launch <= t.end <= t.new_prompt
        assert t.prompt_ms == pytest.approx(r.server_timings["prompt_ms"], abs=0.006)
        assert t.cache_update_ms is not None  # nonce'd prompts: every slot chosen by LRU, its state saved ("prompt cache update took")
        assert t.idle_save_ms >= 0


def test_the_log_tasks_the_capture_launched(tasks):
    # 2 warmup requests, 8 at N=1, 8 at N=4 (README); the cache lines are there (trace level in this build)
    assert len(tasks) == 18 and sum(t.prompt_ms is not None for t in tasks.values()) == 18
    text = (DATA / "smoke-stock.log").read_text()
    assert text.count("prompt cache update took") == 18 and "saving prompt with length" in text


@pytest.mark.parametrize("name", ["smoke-stock-n1.json", "smoke-stock-n4.json"])
def test_parts_add_up_to_the_measured_ttft_and_no_server_span_exceeds_it(tasks, name):
    recs = records(name)
    a = split.point(recs, tasks)
    assert a["source"] == "llama-server timings of 8 requests, its log for 8"
    parts = a["parts"]
    assert set(parts) == set(PARTS) and all(parts[p] is not None for p in PARTS)
    assert sum(parts[p]["mean"] for p in PARTS) == pytest.approx(a["ttft"]["mean"], abs=0.01)
    for r in recs:  # two clocks, one request: the server's spans fit inside the client's TTFT
        t = llama_log.match(tasks, r.server_timings)
        assert t.host_ms + t.queue_ms + r.server_timings["prompt_ms"] <= (r.first - r.send) * 1000
    assert all(parts[p]["p99"] >= parts[p]["mean"] for p in PARTS)
    assert a["client"]["first_byte"]["mean"] <= a["ttft"]["mean"]


def test_the_captured_n1_point_is_flagged_by_the_part_that_holds_it(tasks):
    a = split.point(records("smoke-stock-n1.json"), tasks)
    # recorded: 6.8 ms TTFT, prompt compute 0.9 ms, the remainder 4.0 ms (the loaded 2-core box's HTTP and client)
    assert a["outside_share"] > 0.5 and a["held_by"] == "remainder"
    assert a["flag"] == "TTFT 6.8 ms is 87% outside prompt compute (0.9 ms): held by remainder (4.0 ms)"
    n4 = split.point(records("smoke-stock-n4.json"), tasks)
    assert n4["flag"] is None and n4["outside_share"] < 0.5  # at N=4 prompt compute holds it


def test_without_the_log_host_and_queue_stay_in_the_remainder(tasks):
    recs = records("smoke-stock-n1.json")
    a, full = split.point(recs, {}), split.point(recs, tasks)
    assert a["parts"]["host"] is None and a["parts"]["queue"] is None and "0 of 8 requests matched" in a["why"]["host"]
    assert a["parts"]["remainder"]["mean"] == pytest.approx(full["parts"]["remainder"]["mean"] + full["parts"]["host"]["mean"] + full["parts"]["queue"]["mean"], abs=0.01)


def test_a_log_without_the_servers_clock_is_not_waited_for(tmp_path):
    log = tmp_path / "plain.log"
    log.write_text("slot print_timing: id  3 | task 0 | prompt eval time =  2.00 ms /  32 tokens\n")
    t0 = time.monotonic()
    assert llama_log.read_since(str(log), 0, want=1, wait_s=5) == {} and time.monotonic() - t0 < 1
    assert llama_log.read_since(None, None, want=1) == {} and llama_log.size(str(tmp_path / "none.log")) is None


def test_vllm_parts_from_its_histograms_around_a_batch():
    before, after = (parse_metrics(body_of_raw(f).decode()) for f in ("metrics-1-before-batch.raw", "metrics-2-after-batch.raw"))
    m = split.hist_means(vllm.FAMILY, before, after)
    assert m["ttft"] == pytest.approx(1600 / 8, rel=0.01) and 0 <= m["queue"] < m["prefill"] < m["ttft"]
    rec = RequestRecord(send=0.0, first=(m["ttft"] + 6.0) / 1000, token_times=[(m["ttft"] + 6.0) / 1000], tokens=1, usage_tokens=1, expected_tokens=1, connect_ms=0.5)
    a = split.point([rec], None, m)
    p = a["parts"]
    assert p["queue"]["mean"] == round(m["queue"], 3) and p["prompt"]["mean"] == round(m["prefill"], 3) and p["queue"]["p99"] is None
    assert p["host"]["mean"] + p["queue"]["mean"] + p["prompt"]["mean"] == pytest.approx(m["ttft"], abs=0.01)
    assert p["remainder"]["mean"] == pytest.approx(5.5, abs=0.01) and a["source"].startswith("/metrics histogram means")


def test_sweep_section_pairs_each_part_and_names_the_noisiest(tasks):
    rows = []
    for rep in range(3):
        for eng in ("a", "b"):
            recs = records("smoke-stock-n1.json")[rep * 2 : rep * 2 + 3]
            rows.append({"engine": eng, "n": 1, "repeat": rep, "valid": True, "ttft_anatomy": split.point(recs, tasks)})
    sec = summary.section(rows, "a", 2.0, 0.95)
    pt = sec["points"][0]
    outside = {p: v["mean"] for p, v in pt["parts"].items() if p != "prompt"}
    assert pt["held_by"] == max(outside, key=outside.get) and pt["outside_share"] > 0.5 and len(sec["flags"]) == 2
    prompt = [c for c in sec["paired"] if c["part"] == "prompt"]
    assert prompt and prompt[0]["ratio"] == pytest.approx(1.0) and prompt[0]["n_blocks"] == 3  # the same requests in both arms
    note = summary.open_note(rows, "a", ["b N=1 ttft_mean_ms"])
    assert note.startswith("b N=1: its ") and "part spreads most" in note


def test_the_users_pin_log_prompt_cache_lines_and_tied_timings():
    tasks = llama_log.parse((DATA / "pin-stock.log").read_text())
    assert len(tasks) == 16 and all(t.cache_update_ms is not None for t in tasks.values())  # INFO in the pin
    n1 = records("pin-stock-n1.json")
    tied = [r for r in n1 if len(llama_log.candidates(tasks, r.server_timings)) > 1]
    assert len(tied) == 2 and llama_log.match(tasks, tied[0].server_timings) is None  # the same timings to 10 us
    got = llama_log.assign(tasks, n1 + records("pin-stock-n4.json"))
    assert None not in got and len({t.task for t in got}) == 16
    ids = [t.task for t in got[:8]]
    assert ids == sorted(ids)  # rounds of one: launch order is send order, ties included
    a = split.point(n1, tasks)
    assert a["source"] == "llama-server timings of 8 requests, its log for 8" and a["detail"]["cache_update"]["mean"] > 0
    assert sum(a["parts"][p]["mean"] for p in PARTS) == pytest.approx(a["ttft"]["mean"], abs=0.01)
