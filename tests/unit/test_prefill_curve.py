"""The prefill-curve workload (parity/workloads/prefill_curve.py, prefill_fits.py): its sizing on the
smoke profile, its checks and options, its points, the users' prefill_tps per round, the engine's own
prompt clock, the lines and their pairing over blocks, and its report section, on a recorded run
(tests/data/workloads/README.md: stock and paged llama-server, 3 blocks)."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest
from scipy import stats as sps

from parity.config import load_profile, profile_from_dict
from parity.engines import llama, vllm
from parity.engines.bound import bind_all
from parity.errors import ConfigError, UsageError
from parity.loadgen.record import RequestRecord
from parity.metrics import validity, workload as workload_metrics
from parity.metrics.prometheus import parse
from parity.report.render import _env
from parity.report.rundata import RunData
from parity.report.sections import fmt
from parity.report.workload_sections import workload_section
from parity.serving.workloads import attach, point_row, resolve
from parity.stats.paired import paired
from parity.workloads import WORKLOADS, prefill_fits
from parity.workloads.base import Measured
from parity.workloads.defaults import parse_options, sized
from parity.workloads.prefill_curve import LENGTHS, grid, histogram_mean_ms
from parity.workloads.spec import WorkloadConfig

from tests.unit.test_fake_vllm_vs_real import body_of_raw

DATA = Path(__file__).resolve().parents[1] / "data" / "workloads"
KIND = WORKLOADS["prefill-curve"]


@pytest.fixture(scope="module")
def run() -> dict:
    return json.loads((DATA / "smoke-prefill-curve-summary.json").read_text())


def records(name: str = "smoke-prefill-curve-stock-r0-n-4-128-tok.json") -> list[RequestRecord]:
    return [validity.check_request(RequestRecord(**{k: v for k, v in d.items() if k != "valid"})) for d in json.loads((DATA / name).read_text())]


# ------------------------------------------------------------------ the section, sizing and points


def test_the_smoke_built_in_keeps_the_lengths_its_context_allows_and_says_which_it_left_out():
    assert WorkloadConfig().lengths == LENGTHS  # the section's default is the one the built-in clips
    prof = load_profile("smoke")
    got = sized("prefill-curve", prof, prof.serving)  # ctx 8192 / --parallel 4: 2048 tokens a request
    assert got["lengths"] == [128, 256, 512, 1024] and got["n"] == 4 and got["gen"] == 16 and got["rounds"] == 5
    assert "2048-token request context" in got["description"] and "of the default lengths, 2048, 4096, 8192, 16384 were left out" in got["description"]
    big = KIND.sized(True, 32768, 32, prof.serving)  # issue 54's GPU setup: every default length, N=8, no note
    assert big["lengths"] == [128, 256, 512, 1024, 2048, 4096, 8192, 16384] and big["n"] == 8 and "description" not in big
    tiny = KIND.sized(False, 200, 1, prof.serving)  # no two defaults fit: a quarter, a half and all of the room
    assert tiny["lengths"] == [46, 92, 184] and tiny["n"] == 1


def test_options_and_checks_name_the_key():
    assert parse_options(["n=8", "lengths=[128, 512, 2048]", "rounds=2"]) == {"n": 8, "lengths": [128, 512, 2048], "rounds": 2}
    for bad, what in (([128], "at least two distinct"), ([128, 128], "at least two distinct"), ([8, 128], "16 tokens or more")):
        with pytest.raises(ConfigError, match=rf"serving.workloads.pc.lengths: .*{what}"):
            profile_from_dict({"name": "t", "serving": {"workloads": {"pc": {"kind": "prefill-curve", "lengths": bad}}}})
    with pytest.raises(ConfigError, match=r"serving.workloads.pc.n: must be positive"):
        profile_from_dict({"name": "t", "serving": {"workloads": {"pc": {"kind": "prefill-curve", "n": 0}}}})


def test_points_run_n_1_then_n_and_attach_refuses_what_the_engines_cannot_take():
    prof = profile_from_dict({"name": "t", "engines": {"a": {"kind": "llama", "bin_dir": "/x"}}, "serving": {"engines": ["a"], "parallel": 4, "ctx": 8192}})
    s = prof.serving
    wl = resolve(prof, "prefill-curve", s, options={"lengths": [128, 1024], "n": 4})
    assert wl.builtin and "lengths" not in wl.sized and "gen" in wl.sized  # what the command line wrote is kept; gen may be calibrated
    assert grid(wl) == [(1, "N=1 128 tok", 1, 128), (2, "N=1 1024 tok", 1, 1024), (3, "N=4 128 tok", 4, 128), (4, "N=4 1024 tok", 4, 1024)]
    plan = SimpleNamespace(engines=["a"], bound=bind_all(prof, ["a"]), shape=s, limits={"a": 2048}, limit_what={"a": "-c 8192 / --parallel 4"}, npl=[1])
    attach(plan, wl)
    assert plan.npl == [1, 2, 3, 4] and KIND.cap(2048, wl) == (1024, "less the longest prompt (1024 tokens)")
    with pytest.raises(UsageError, match=r"8 requests in flight exceed --parallel 4"):
        attach(plan, resolve(prof, "prefill-curve", s, options={"n": 8}))
    with pytest.raises(UsageError, match=r"a request needs 4112 tokens \(prompt \+ generated\) but engine a gives 2048"):
        attach(plan, resolve(prof, "prefill-curve", s, options={"lengths": [128, 4096], "n": 1}))
    assert [label for _, label in resolve(prof, "prefill-curve", s, options={"n": 1}).points()][-1].startswith("N=1 ")  # n=1: N=1 only


# ------------------------------------------------------------------ a point's numbers


def test_a_recorded_point_gives_the_users_prefill_tps_per_round_and_the_engines_own_clock():
    recs = records()
    wl = SimpleNamespace(kind="prefill-curve", cfg=SimpleNamespace(slo=None))
    row = point_row("prefill-curve", wl.cfg, Measured(5, "N=4 128 tok", recs, extra={"prompt_len": 128, "concurrency": 4, "rounds": 5}), None, 0.0, 0.0)
    assert row["valid"] and row["requests"] == 20
    rounds = [recs[i : i + 4] for i in range(0, 20, 4)]
    assert all(max(r.send for r in rd) < min(r.first for r in rd) for rd in rounds)  # each round went at once, before its first token
    assert all(max(r.end for r in a) < min(r.send for r in b) for a, b in zip(rounds, rounds[1:]))  # and the next after it ended
    theirs = [512 / max(r.first - r.send for r in rd) for rd in rounds]  # h2h: a round's prompt tokens / its longest TTFT
    assert row["users_prefill_tps"] == pytest.approx(statistics.fmean(theirs), rel=1e-4)
    # the point-wide formula counts all 5 rounds' tokens over the one longest TTFT: several times theirs
    assert row["prefill_tps"] == pytest.approx(5 * 512 / max(r.first - r.send for r in recs), rel=1e-4) and row["prefill_tps"] > 3 * row["users_prefill_tps"]
    ms = [r.server_timings["prompt_ms"] for r in recs]
    ns = [r.server_timings["prompt_n"] for r in recs]
    assert row["engine_prompt_ms_mean"] == pytest.approx(statistics.fmean(ms), abs=1e-4) and row["engine_prompt_ms_p50"] == pytest.approx(statistics.median(ms), abs=1e-4)
    assert row["engine_prompt_n_mean"] == pytest.approx(statistics.fmean(ns)) and row["engine_prompt_tps"] == pytest.approx(sum(ns) / sum(ms) * 1000, abs=1e-3)
    assert row["engine_prompt_n_mean"] + row["cached_prompt_tokens"] / 20 == 128  # computed + cached = the prompt sent


def test_without_timings_the_engine_clock_is_a_reason_and_vllms_comes_from_its_prefill_histogram():
    recs = records()
    for r in recs:
        r.server_timings = None  # a vLLM response carries no timings
    sample = workload_metrics.Sample(recs)
    row, why = workload_metrics.compute(["engine_prompt_ms_mean", "engine_prompt_tps"], sample)
    assert row == {"engine_prompt_ms_mean": None, "engine_prompt_tps": None} and "no timings.prompt_ms" in why["engine_prompt_ms_mean"]
    recs[0].server_timings = {"prompt_ms": 5.0, "prompt_n": 128}
    _, why = workload_metrics.compute(["engine_prompt_ms_mean"], workload_metrics.Sample(recs))
    assert why["engine_prompt_ms_mean"] == "19 of 20 valid responses carry no timings.prompt_ms"  # no mean over the ones that said
    # real vLLM /metrics around 8 requests (tests/data/vllm): prefill_time_seconds sum 1.5303 -> 2.1753 s, count 10 -> 18
    before, after = (parse(body_of_raw(f).decode()) for f in ("metrics-1-before-batch.raw", "metrics-2-after-batch.raw"))
    assert histogram_mean_ms(before, after, vllm.FAMILY.prefill) == pytest.approx((2.1752589449997686 - 1.5302792400007093) / 8 * 1000, abs=1e-3)
    assert histogram_mean_ms(before, after, llama.FAMILY.prefill) is None and histogram_mean_ms(None, after, vllm.FAMILY.prefill) is None


# ------------------------------------------------------------------ the lines and their pairing


def test_the_lines_of_a_recorded_run_are_least_squares_through_its_points(run):
    fits = {(f["curve"], f["engine"], f["n"]): f for f in prefill_fits.fits(run["rows"])}
    assert sorted(fits) == [(c, e, n) for c in ("prompt", "ttft") for e in ("paged", "stock") for n in (1, 4)]
    for (curve, eng, conc), f in fits.items():
        rows = [r for r in run["rows"] if r["engine"] == eng and r["concurrency"] == conc and r["valid"]]
        if curve == "ttft":  # the round's prompt tokens against the median TTFT
            xy = [(conc * r["prompt_len"], r["ttft_p50_ms"]) for r in rows]
        else:  # one request's computed tokens against its median prompt time
            xy = [(r["engine_prompt_n_mean"], r["engine_prompt_ms_p50"]) for r in rows]
        ref = sps.linregress([x for x, _ in xy], [y for _, y in xy])
        assert f["points"] == len(xy) == 12 and f["blocks"] == [0, 1, 2]
        assert f["slope"] == pytest.approx(ref.slope, rel=1e-5) and f["intercept"] == pytest.approx(ref.intercept, rel=1e-5, abs=1e-5)
        assert f["prefill_tps"] == pytest.approx(1000 / ref.slope, rel=1e-5) and f["prefill_tps_low"] < f["prefill_tps"] < f["prefill_tps_high"]
        for b in (0, 1, 2):  # each block's own line
            bx = [p for p, r in zip(xy, rows) if r["repeat"] == b]
            assert f["block_prefill_tps"][b] == pytest.approx(1000 / sps.linregress(*zip(*bx)).slope, rel=1e-5)
        longest = [r for r in rows if r["prompt_len"] == 1024]
        assert f["engine_tps_longest"] == pytest.approx(statistics.median(r["engine_prompt_tps"] for r in longest), abs=1e-3)
        assert f["users_prefill_tps_longest"] == pytest.approx(statistics.median(r["users_prefill_tps"] for r in longest), abs=1e-3)
        assert ("vs_engine_longest_pct" in f) == (curve == "prompt" or conc == 1)  # a round's rate at N=4 is not one request's


def test_at_n_1_the_ttft_line_reproduces_the_engine_time_line_within_5_percent(run):
    """The recorded smoke run (real llama-server, 3 blocks): the TTFT line's tok/s is the engine-time
    line's within 5 % (paged -2.2 %, stock -2.1 %); at 1024 tokens the engine's own tok/s, which
    still holds its fixed cost per prompt, is further off for stock (-5.5 %)."""
    fits = {(f["curve"], f["engine"], f["n"]): f for f in prefill_fits.fits(run["rows"])}
    for eng in ("paged", "stock"):
        t, p = fits[("ttft", eng, 1)], fits[("prompt", eng, 1)]
        assert t["engine_line_tps"] == p["prefill_tps"]
        assert t["vs_engine_line_pct"] == pytest.approx((t["prefill_tps"] / p["prefill_tps"] - 1) * 100, abs=1e-3)
        assert -5 < t["vs_engine_line_pct"] < 0  # the client-side cost that grows with the prompt
        assert "engine_line_tps" not in fits[("ttft", eng, 4)] and "engine_line_tps" not in p
    assert fits[("ttft", "stock", 1)]["vs_engine_longest_pct"] < -5 < fits[("ttft", "stock", 1)]["vs_engine_line_pct"]


def test_engine_over_reference_is_paired_over_the_blocks_lines(run):
    pc = prefill_fits.summary(run["rows"], "stock", 2.0, 0.95)
    fits = {(f["curve"], f["engine"], f["n"]): f for f in pc["fits"]}
    got = {(p["curve"], p["n"], p["metric"]): p for p in pc["paired"]}
    assert sorted({k[2] for k in got}) == ["intercept_diff_ms", "intercept_ms", "prefill_tps"] and all(p["engine"] == "paged" for p in got.values())
    for curve in ("ttft", "prompt"):
        a, b = fits[(curve, "stock", 1)]["block_prefill_tps"], fits[(curve, "paged", 1)]["block_prefill_tps"]
        p = got[(curve, 1, "prefill_tps")]
        logs = [math.log(b[k] / a[k]) for k in (0, 1, 2)]
        assert p["ratio"] == pytest.approx(math.exp(statistics.fmean(logs)), rel=1e-5) and p["n_blocks"] == 3
        assert (p["low"], p["high"]) == pytest.approx((paired(a, b).low, paired(a, b).high), rel=1e-5)
        d = got[(curve, 1, "intercept_diff_ms")]
        ia, ib = fits[(curve, "stock", 1)]["block_intercept_ms"], fits[(curve, "paged", 1)]["block_intercept_ms"]
        assert d["diff"] == pytest.approx(statistics.fmean(ib[k] - ia[k] for k in (0, 1, 2)), abs=1e-6) and d["low"] < d["diff"] < d["high"]
    # stock's N=1 intercepts are all below 0 in this run (its curve bends upward): no ratio, and why
    assert got[("prompt", 1, "intercept_ms")]["ratio"] is None and "intercept_ms <= 0 in block(s) 0, 1, 2" in got[("prompt", 1, "intercept_ms")]["reason"]


def test_the_same_token_ids_reached_every_engine_of_a_block_and_a_difference_is_named(run):
    assert prefill_fits.different_prompts(run["rows"]) == []
    digests = {(r["repeat"], r["point"]): r["prompt_digest"] for r in run["rows"] if r["engine"] == "stock"}
    assert len(set(digests.values())) == len(digests)  # every block and point its own prompts
    rows = [dict(r) for r in run["rows"]]
    moved = next(r for r in rows if r["engine"] == "paged" and r["repeat"] == 1 and r["point"] == "N=1 512 tok")
    moved["prompt_digest"] = "0" * 16
    assert prefill_fits.different_prompts(rows) == [f"block 1 N=1 512 tok: paged {'0' * 16}, stock {digests[(1, 'N=1 512 tok')]}"]


def test_invalid_and_discarded_rows_leave_the_lines(run):
    rows = [dict(r) for r in run["rows"]]
    for r in rows:
        if r["engine"] == "stock" and r["repeat"] == 2:
            r["valid"] = False
        if r["engine"] == "paged" and r["repeat"] == 0:
            r["discarded"] = True
    fits = {(f["curve"], f["engine"], f["n"]): f for f in prefill_fits.fits(rows)}
    assert fits[("ttft", "stock", 1)]["blocks"] == [0, 1] and fits[("ttft", "paged", 1)]["blocks"] == [1, 2]
    p = {(x["curve"], x["n"], x["metric"]): x for x in prefill_fits.paired_fits(list(fits.values()), "stock", 2.0, 0.95)}
    assert p[("ttft", 1, "prefill_tps")]["n_blocks"] == 1 and p[("ttft", 1, "prefill_tps")]["low"] is None


# ------------------------------------------------------------------ the report


def test_the_report_section_has_the_lines_the_pairing_and_the_plot(run, tmp_path):
    w = workload_section(RunData(Path("/run"), {}, summary=run), tmp_path / "assets", "assets")
    assert w["kind"] == "prefill-curve" and [p["file"] for p in w["plots"]] == ["assets/workload_prefill_curve.png"]
    assert (tmp_path / "assets" / "workload_prefill_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines, pairs = w["tables"]
    assert lines["title"] == "Prefill curve: the fitted lines" and len(lines["rows"]) == 8
    assert any("users' prefill_tps" in h and "theirs" in h for h in lines["head"])
    first = run["prefill_curve"]["fits"][0]
    assert lines["rows"][0][:4] == [first["engine"], first["n"], "TTFT (client)", "client TTFT, median per point"]
    assert lines["rows"][0][4] == f"{fmt(first['prefill_tps'])} [{fmt(first['prefill_tps_low'])}, {fmt(first['prefill_tps_high'])}]"
    assert pairs["title"] == "Prefill curve: engine / reference, paired over blocks" and len(pairs["rows"]) == 12
    text = _env().get_template("_workloads.md.j2").render(workload=w)
    assert "### Prefill curve: the fitted lines" in text and "![TTFT and engine prompt time vs prompt length](assets/workload_prefill_curve.png)" in text
    assert "built in, sized for a 2048-token request context" in text
    console = KIND.console(run)
    assert console[0] == "prefill curve, " + run["prefill_curve"]["lines"][0] and any("paged/stock N=1 TTFT (client) prefill_tps:" in c for c in console)
    assert KIND.tables({"rows": []}, fmt)[0]["rows"] == [] and prefill_fits.curve_plot([], tmp_path / "none.png") is None
